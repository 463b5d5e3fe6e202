#include "casting/json_value.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::casting {
namespace {

class Parser {
 public:
  Parser(absl::string_view text, int max_depth)
      : text_(text), max_depth_(max_depth) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    if (absl::Status s = ParseValue(value, 0); !s.ok()) return s;
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("trailing characters");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", pos_, ": ", what));
  }

  void SkipWhitespace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::Status ParseValue(JsonValue& out, int depth) {
    if (depth > max_depth_) return Error("nesting too deep");
    SkipWhitespace();
    if (pos_ >= text_.size()) return Error("unexpected end, expected a value");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out.kind = JsonValue::Kind::kString;
      return ParseString(out.text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    if (Consume("true") || Consume("false")) {
      out.kind = JsonValue::Kind::kBool;
      out.boolean = c == 't';
      return absl::OkStatus();
    }
    if (Consume("null")) {
      out.kind = JsonValue::Kind::kNull;
      return absl::OkStatus();
    }
    return Error("expected a value");
  }

  absl::Status ParseObject(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    SkipWhitespace();
    if (Consume("}")) return absl::OkStatus();
    std::set<std::string> keys;
    while (true) {
      SkipWhitespace();
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Error("expected a string key");
      }
      std::string key;
      if (absl::Status s = ParseString(key); !s.ok()) return s;
      if (!keys.insert(key).second) {
        return Error(absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipWhitespace();
      if (!Consume(":")) return Error("expected ':'");
      out.members.emplace_back(std::move(key), JsonValue());
      if (absl::Status s = ParseValue(out.members.back().second, depth + 1);
          !s.ok()) {
        return s;
      }
      SkipWhitespace();
      if (Consume("}")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    SkipWhitespace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      out.items.emplace_back();
      if (absl::Status s = ParseValue(out.items.back(), depth + 1); !s.ok()) {
        return s;
      }
      SkipWhitespace();
      if (Consume("]")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  bool ConsumeDigits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      ++pos_;
    }
    return pos_ > start;
  }

  absl::Status ParseNumber(JsonValue& out) {
    const size_t start = pos_;
    Consume("-");
    if (Consume("0")) {
      // A leading zero stands alone.
    } else if (!ConsumeDigits()) {
      return Error("expected digits");
    }
    if (Consume(".") && !ConsumeDigits()) return Error("expected fraction");
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (!Consume("+")) Consume("-");
      if (!ConsumeDigits()) return Error("expected exponent");
    }
    out.kind = JsonValue::Kind::kNumber;
    out.text = std::string(text_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (text_.size() - pos_ < 4) return Error("truncated \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      code <<= 4;
      if (c >= '0' && c <= '9') {
        code |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        code |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        code |= c - 'A' + 10;
      } else {
        return Error("bad hex digit in \\u escape");
      }
    }
    return code;
  }

  static void AppendUtf8(uint32_t code, std::string& out) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  absl::Status ParseUnicodeEscape(std::string& out) {
    absl::StatusOr<uint32_t> code = ParseHex4();
    if (!code.ok()) return code.status();
    if (*code >= 0xDC00 && *code <= 0xDFFF) return Error("lone low surrogate");
    if (*code >= 0xD800 && *code <= 0xDBFF) {
      if (!Consume("\\u")) return Error("lone high surrogate");
      absl::StatusOr<uint32_t> low = ParseHex4();
      if (!low.ok()) return low.status();
      if (*low < 0xDC00 || *low > 0xDFFF) return Error("bad surrogate pair");
      *code = 0x10000 + ((*code - 0xD800) << 10) + (*low - 0xDC00);
    }
    AppendUtf8(*code, out);
    return absl::OkStatus();
  }

  absl::Status ParseEscape(std::string& out) {
    if (pos_ >= text_.size()) return Error("unterminated string");
    const char c = text_[pos_++];
    switch (c) {
      case '"':
        out += '"';
        return absl::OkStatus();
      case '\\':
        out += '\\';
        return absl::OkStatus();
      case '/':
        out += '/';
        return absl::OkStatus();
      case 'b':
        out += '\b';
        return absl::OkStatus();
      case 'f':
        out += '\f';
        return absl::OkStatus();
      case 'n':
        out += '\n';
        return absl::OkStatus();
      case 'r':
        out += '\r';
        return absl::OkStatus();
      case 't':
        out += '\t';
        return absl::OkStatus();
      case 'u':
        return ParseUnicodeEscape(out);
      default:
        return Error("bad escape");
    }
  }

  absl::Status ParseString(std::string& out) {
    ++pos_;  // '"'
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in string");
      }
      if (c == '\\') {
        if (absl::Status s = ParseEscape(out); !s.ok()) return s;
      } else {
        out += c;
      }
    }
    return Error("unterminated string");
  }

  absl::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
};

}  // namespace

absl::string_view JsonKindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kNumber:
      return "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "unknown";
}

absl::StatusOr<uint64_t> JsonValue::AsUint64() const {
  if (kind != Kind::kNumber || text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer, got ", JsonKindName(kind)));
  }
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a non-negative integer, got ", text));
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("integer ", text, " does not fit 64 bits"));
    }
    value = value * 10 + digit;
  }
  return value;
}

const JsonValue* JsonValue::Member(absl::string_view key) const {
  for (const auto& [name, value] : members) {
    if (name == key) return &value;
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth) {
  return Parser(text, max_depth).ParseDocument();
}

}  // namespace castserve::casting
