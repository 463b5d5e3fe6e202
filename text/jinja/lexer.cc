#include "text/jinja/lexer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string PositionText(int line, int column) {
  return absl::StrCat("line ", line, ", column ", column);
}

namespace {

// The source as jinja2 reads it: newlines as "\n", one final newline gone.
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of `text` without its trailing Python whitespace.
size_t RStrippedLength(absl::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 &&
           (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    size_t pos = start;
    if (!IsPythonSpace(NextCodePoint(text, &pos))) break;
    end = start;
  }
  return end;
}

// Position after the Python whitespace that starts at `pos`.
size_t SkipPythonSpace(absl::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsPythonSpace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

void AppendHexDigit(char c, int* value) {
  *value =
      *value * 16 +
      (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run();

 private:
  void Emit(Token::Kind kind, std::string value, size_t at) {
    tokens_.push_back({kind, std::move(value), LineOf(at), ColumnOf(at)});
  }
  int LineOf(size_t at);
  int ColumnOf(size_t at) const {
    return static_cast<int>(at - line_start_) + 1;
  }
  absl::Status Error(size_t at, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("template syntax error at ",
                     PositionText(LineOf(at), ColumnOf(at)), ": ", what));
  }
  // Data before a tag opening at `tag`, stripped as its modifier says.
  void EmitData(size_t from, size_t tag, char modifier, bool is_variable);
  // Inside {{ }} or {% %}; on return pos_ is past the closing tag.
  absl::Status LexTag(bool is_block);
  absl::Status LexComment();
  absl::Status LexString(size_t at);
  void LexNumber(size_t at);
  // Past the end tag at pos_ ("-%}", "+%}", "%}", "-}}", "}}"), applying
  // its whitespace control; false if none is at pos_.
  bool ConsumeEnd(bool is_block);

  std::string source_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
  std::vector<char> brackets_;
  // LineOf's cache: the line holding line_start_.
  int line_ = 1;
  size_t line_start_ = 0;
  size_t scanned_ = 0;
};

int Lexer::LineOf(size_t at) {
  if (at < scanned_) {  // Rare: a position behind the cache.
    line_ = 1;
    line_start_ = 0;
    scanned_ = 0;
  }
  for (; scanned_ < at; ++scanned_) {
    if (source_[scanned_] == '\n') {
      ++line_;
      line_start_ = scanned_ + 1;
    }
  }
  return line_;
}

void Lexer::EmitData(size_t from, size_t tag, char modifier, bool is_variable) {
  absl::string_view text(source_.data() + from, tag - from);
  if (modifier == '-') {
    text = text.substr(0, RStrippedLength(text));
  } else if (modifier != '+' && !is_variable) {
    size_t line_begin = text.rfind('\n');
    line_begin = line_begin == absl::string_view::npos ? 0 : line_begin + 1;
    if ((line_begin > 0 || line_starting_) &&
        text.find_first_not_of(" \t", line_begin) == absl::string_view::npos) {
      text = text.substr(0, line_begin);
    }
  }
  if (!text.empty()) Emit(Token::Kind::kData, std::string(text), from);
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < source_.size()) {
    size_t tag = source_.find('{', pos_);
    while (tag != std::string::npos && tag + 1 < source_.size() &&
           source_[tag + 1] != '{' && source_[tag + 1] != '%' &&
           source_[tag + 1] != '#') {
      tag = source_.find('{', tag + 1);
    }
    if (tag == std::string::npos || tag + 1 >= source_.size()) {
      Emit(Token::Kind::kData, source_.substr(pos_), pos_);
      break;
    }
    char type = source_[tag + 1];
    char modifier = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
    if (modifier != '-' && modifier != '+') modifier = '\0';
    EmitData(pos_, tag, modifier, type == '{');
    pos_ = tag + 2 + (modifier != '\0');
    absl::Status status;
    if (type == '#') {
      status = LexComment();
    } else {
      Emit(type == '%' ? Token::Kind::kBlockBegin : Token::Kind::kVariableBegin,
           "", tag);
      status = LexTag(type == '%');
    }
    if (!status.ok()) return status;
  }
  Emit(Token::Kind::kEnd, "", source_.size());
  return std::move(tokens_);
}

absl::Status Lexer::LexComment() {
  size_t end = source_.find("#}", pos_);
  if (end == std::string::npos) return Error(pos_, "unterminated comment");
  char modifier = end > pos_ ? source_[end - 1] : '\0';
  pos_ = end + 2;
  if (modifier == '-') {
    pos_ = SkipPythonSpace(source_, pos_);
  } else if (modifier != '+' && pos_ < source_.size() &&
             source_[pos_] == '\n') {
    ++pos_;
  }
  line_starting_ = source_[pos_ - 1] == '\n';
  return absl::OkStatus();
}

bool Lexer::ConsumeEnd(bool is_block) {
  absl::string_view rest(source_.data() + pos_, source_.size() - pos_);
  absl::string_view close = is_block ? "%}" : "}}";
  char modifier = '\0';
  if (rest.size() >= 3 && (rest[0] == '-' || rest[0] == '+') &&
      rest.substr(1, 2) == close) {
    modifier = rest[0];
    pos_ += 3;
  } else if (rest.substr(0, 2) == close) {
    pos_ += 2;
  } else {
    return false;
  }
  Emit(is_block ? Token::Kind::kBlockEnd : Token::Kind::kVariableEnd, "", pos_);
  if (modifier == '-') {
    pos_ = SkipPythonSpace(source_, pos_);
  } else if (is_block && modifier != '+' && pos_ < source_.size() &&
             source_[pos_] == '\n') {
    ++pos_;  // trim_blocks.
  }
  line_starting_ = source_[pos_ - 1] == '\n';
  return true;
}

absl::Status Lexer::LexTag(bool is_block) {
  static constexpr absl::string_view kTwoCharOperators[] = {
      "//", "**", "==", "!=", "<=", ">="};
  brackets_.clear();
  while (true) {
    pos_ = SkipPythonSpace(source_, pos_);
    if (pos_ >= source_.size()) {
      return Error(pos_, is_block ? "missing '%}'" : "missing '}}'");
    }
    if (brackets_.empty() && ConsumeEnd(is_block)) return absl::OkStatus();
    size_t at = pos_;
    char c = source_[pos_];
    if (IsNameStart(c)) {
      while (pos_ < source_.size() && IsNameChar(source_[pos_])) ++pos_;
      Emit(Token::Kind::kName, source_.substr(at, pos_ - at), at);
      if (is_block && tokens_.size() >= 2 &&
          tokens_[tokens_.size() - 2].kind == Token::Kind::kBlockBegin &&
          tokens_.back().value == "raw") {
        return Error(at, "unsupported construct 'raw'");
      }
      continue;
    }
    if (absl::ascii_isdigit(c)) {
      LexNumber(at);
      continue;
    }
    if (c == '\'' || c == '"') {
      absl::Status status = LexString(at);
      if (!status.ok()) return status;
      continue;
    }
    std::string op(1, c);
    for (absl::string_view two : kTwoCharOperators) {
      if (absl::string_view(source_).substr(pos_, 2) == two)
        op = std::string(two);
    }
    if (op.size() == 1 && absl::string_view("+-*/%~[](){}<>=.:|,;").find(c) ==
                              absl::string_view::npos) {
      return Error(
          at, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') brackets_.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets_.empty() || brackets_.back() != open) {
        return Error(at, absl::StrCat("unexpected '", op, "'"));
      }
      brackets_.pop_back();
    }
    pos_ += op.size();
    Emit(Token::Kind::kOperator, op, at);
  }
}

void Lexer::LexNumber(size_t at) {
  auto digits = [this](std::string* out) {
    while (pos_ < source_.size() &&
           (absl::ascii_isdigit(source_[pos_]) ||
            (source_[pos_] == '_' && pos_ + 1 < source_.size() &&
             absl::ascii_isdigit(source_[pos_ + 1])))) {
      if (source_[pos_] != '_') *out += source_[pos_];
      ++pos_;
    }
  };
  std::string text;
  digits(&text);
  bool after_dot = tokens_.size() > 0 &&
                   tokens_.back().kind == Token::Kind::kOperator &&
                   tokens_.back().value == ".";
  bool is_float = false;
  if (!after_dot && pos_ + 1 < source_.size() && source_[pos_] == '.' &&
      absl::ascii_isdigit(source_[pos_ + 1])) {
    is_float = true;
    text += source_[pos_++];
    digits(&text);
  }
  if (!after_dot && pos_ < source_.size() &&
      (source_[pos_] == 'e' || source_[pos_] == 'E')) {
    size_t mark = pos_ + 1;
    if (mark < source_.size() && (source_[mark] == '+' || source_[mark] == '-'))
      ++mark;
    if (mark < source_.size() && absl::ascii_isdigit(source_[mark])) {
      is_float = true;
      text += source_.substr(pos_, mark - pos_);
      pos_ = mark;
      digits(&text);
    }
  }
  Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInteger, text, at);
}

// Python's "unicode-escape" decoding of a string literal's body.
absl::Status Lexer::LexString(size_t at) {
  char quote = source_[pos_++];
  std::string value;
  while (true) {
    if (pos_ >= source_.size()) return Error(at, "unterminated string");
    char c = source_[pos_++];
    if (c == quote) break;
    if (c != '\\') {
      value += c;
      continue;
    }
    if (pos_ >= source_.size()) return Error(at, "unterminated string");
    char e = source_[pos_++];
    int hex_digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (hex_digits > 0) {
      int code = 0;
      for (int i = 0; i < hex_digits; ++i) {
        if (pos_ >= source_.size() || !absl::ascii_isxdigit(source_[pos_])) {
          return Error(at, "truncated \\x, \\u or \\U escape in string");
        }
        AppendHexDigit(source_[pos_++], &code);
      }
      if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
        return Error(at, "escape outside Unicode scalar values in string");
      }
      AppendUtf8(static_cast<char32_t>(code), &value);
      continue;
    }
    if (e >= '0' && e <= '7') {
      int code = e - '0';
      for (int i = 0; i < 2 && pos_ < source_.size() && source_[pos_] >= '0' &&
                      source_[pos_] <= '7';
           ++i) {
        code = code * 8 + (source_[pos_++] - '0');
      }
      AppendUtf8(static_cast<char32_t>(code), &value);
      continue;
    }
    switch (e) {
      case '\n':
        break;  // Line continuation.
      case '\\':
      case '\'':
      case '"':
        value += e;
        break;
      case 'a':
        value += '\a';
        break;
      case 'b':
        value += '\b';
        break;
      case 'f':
        value += '\f';
        break;
      case 'n':
        value += '\n';
        break;
      case 'r':
        value += '\r';
        break;
      case 't':
        value += '\t';
        break;
      case 'v':
        value += '\v';
        break;
      case 'N':
        return Error(at, "unsupported construct '\\N{...}' escape");
      default:
        value += '\\';
        value += e;
    }
  }
  Emit(Token::Kind::kString, std::move(value), at);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  if (!IsValidUtf8(source)) {
    return absl::InvalidArgumentError("template is not valid UTF-8");
  }
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace castserve::text::jinja
