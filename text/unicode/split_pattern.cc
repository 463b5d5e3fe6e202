#include "text/unicode/split_pattern.h"

#include <re2/re2.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

// Unicode White_Space, which Oniguruma's \s matches (RE2's is ASCII).
constexpr absl::string_view kWhitespaceRanges =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
    "\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode \w: letters, marks, decimal digits, connectors.
constexpr absl::string_view kWordRanges = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
// The lookahead ending RE2 cannot compile, emulated (see the header).
constexpr absl::string_view kLookaheadEnding = "\\s+(?!\\S)|\\s+";

absl::Status Unsupported(absl::string_view pattern, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("regular expression \"", pattern, "\": ", what,
                   " is not supported (RE2 has no lookaround or atomic "
                   "groups; only a final \\s+(?!\\S)|\\s+ is emulated)"));
}

// One escape `\c` rewritten; `in_class` inside [...].
absl::Status TranslateEscape(absl::string_view pattern, char c, bool in_class,
                             std::string* out) {
  auto outside = [&](absl::string_view ranges, bool negated) {
    absl::StrAppend(out, negated ? "[^" : "[", ranges, "]");
  };
  switch (c) {
    case 's':
      in_class ? absl::StrAppend(out, kWhitespaceRanges)
               : outside(kWhitespaceRanges, false);
      return absl::OkStatus();
    case 'w':
      in_class ? absl::StrAppend(out, kWordRanges)
               : outside(kWordRanges, false);
      return absl::OkStatus();
    case 'd':
      absl::StrAppend(out, "\\p{Nd}");
      return absl::OkStatus();
    case 'D':
      absl::StrAppend(out, "\\P{Nd}");
      return absl::OkStatus();
    case 'S':
    case 'W':
      if (in_class)
        return Unsupported(pattern, "a negated class escape in [...]");
      outside(c == 'S' ? kWhitespaceRanges : kWordRanges, true);
      return absl::OkStatus();
    default:
      out->push_back('\\');
      out->push_back(c);
      return absl::OkStatus();
  }
}

absl::Status TranslateBody(absl::string_view pattern, absl::string_view body,
                           std::string* out) {
  bool in_class = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '\\' && i + 1 < body.size()) {
      if (absl::Status status =
              TranslateEscape(pattern, body[++i], in_class, out);
          !status.ok()) {
        return status;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      if (c == '[' && (i + 1 >= body.size() || body[i + 1] != ':')) {
        return Unsupported(pattern, "a nested character class");
      }
      if (c == '&' && i + 1 < body.size() && body[i + 1] == '&') {
        return Unsupported(pattern, "a class intersection (&&)");
      }
      if (c == '[') {  // [:alpha:] inside a class: copy through ":]".
        const size_t close = body.find(":]", i + 2);
        if (close == absl::string_view::npos) {
          return Unsupported(pattern, "an unterminated [: class");
        }
        absl::StrAppend(out, body.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
      out->push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out->push_back(c);
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < body.size() && body[i + 1] == '^') out->push_back(body[++i]);
      if (i + 1 < body.size() && body[i + 1] == ']') out->push_back(body[++i]);
      continue;
    }
    if (c == '(' && i + 2 < body.size() && body[i + 1] == '?') {
      const absl::string_view rest = body.substr(i + 2);
      if (absl::StartsWith(rest, "=") || absl::StartsWith(rest, "!") ||
          absl::StartsWith(rest, "<=") || absl::StartsWith(rest, "<!") ||
          absl::StartsWith(rest, ">")) {
        return Unsupported(pattern, "a lookaround or atomic group");
      }
    }
    out->push_back(c);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TranslateOnigurumaPattern(absl::string_view pattern,
                                                      int* lookahead_group) {
  absl::string_view body = pattern;
  bool emulate_lookahead = false;
  if (absl::EndsWith(pattern, kLookaheadEnding)) {
    body.remove_suffix(kLookaheadEnding.size());
    // Only as whole top-level alternatives: the whole pattern or after '|'.
    if (body.empty() ||
        (absl::EndsWith(body, "|") && !absl::EndsWith(body, "\\|"))) {
      emulate_lookahead = true;
    } else {
      body = pattern;
    }
  }
  std::string out;
  if (absl::Status status = TranslateBody(pattern, body, &out); !status.ok()) {
    return status;
  }
  *lookahead_group = 0;
  if (emulate_lookahead) {
    absl::StrAppend(&out, "([", kWhitespaceRanges, "]+)");
    *lookahead_group = -1;  // the last group; Create counts them
  }
  return out;
}

SplitPattern::SplitPattern(PatternSpec spec, std::unique_ptr<re2::RE2> regex,
                           int lookahead_group)
    : spec_(std::move(spec)),
      regex_(std::move(regex)),
      lookahead_group_(lookahead_group) {}

SplitPattern::~SplitPattern() = default;

absl::StatusOr<std::unique_ptr<SplitPattern>> SplitPattern::Create(
    const PatternSpec& spec) {
  if (!spec.is_regex) {
    return std::unique_ptr<SplitPattern>(new SplitPattern(spec, nullptr, 0));
  }
  int lookahead_group = 0;
  absl::StatusOr<std::string> translated =
      TranslateOnigurumaPattern(spec.text, &lookahead_group);
  if (!translated.ok()) return translated.status();
  re2::RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(int64_t{64} << 20);
  auto regex = std::make_unique<re2::RE2>(*translated, options);
  if (!regex->ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("regular expression \"", spec.text,
                     "\" does not compile: ", regex->error()));
  }
  if (lookahead_group != 0) lookahead_group = regex->NumberOfCapturingGroups();
  return std::unique_ptr<SplitPattern>(
      new SplitPattern(spec, std::move(regex), lookahead_group));
}

std::vector<SplitPattern::Span> SplitPattern::FindMatches(
    absl::string_view text) const {
  return regex_ == nullptr ? FindLiteral(text) : FindRegex(text);
}

std::vector<SplitPattern::Span> SplitPattern::FindLiteral(
    absl::string_view text) const {
  std::vector<Span> matches;
  const absl::string_view needle = spec_.text;
  if (needle.empty()) return matches;
  for (size_t at = text.find(needle); at != absl::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    matches.emplace_back(at, at + needle.size());
  }
  return matches;
}

std::vector<SplitPattern::Span> SplitPattern::FindRegex(
    absl::string_view text) const {
  std::vector<Span> matches;
  const re2::StringPiece whole(text.data(), text.size());
  re2::StringPiece match;
  size_t pos = 0;
  while (pos <= text.size()) {
    // The match's extent only: RE2 answers this with its DFA.
    if (!regex_->Match(whole, pos, text.size(), re2::RE2::UNANCHORED, &match,
                       1)) {
      break;
    }
    const size_t begin = match.data() - text.data();
    size_t end = begin + match.size();
    if (begin == end) {  // empty matches split nothing; step one character
      if (end >= text.size()) break;
      pos = end + Utf8Length(static_cast<unsigned char>(text[end]));
      continue;
    }
    if (end < text.size()) end = LookaheadEnd(text, begin, end);
    matches.emplace_back(begin, end);
    pos = end;
  }
  return matches;
}

size_t SplitPattern::LookaheadEnd(absl::string_view text, size_t begin,
                                  size_t end) const {
  if (lookahead_group_ == 0) return end;
  size_t last = end - 1;  // the last character's first byte
  while ((static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
  size_t probe = last;
  // Only a run of two or more whitespace characters can be the emulated
  // group's and give one back.
  if (last == begin || !IsWhitespace(NextCodePoint(text, &probe))) return end;
  // Which alternative matched: the same match anchored at both ends gives
  // the same (highest-priority) alternative.
  std::vector<re2::StringPiece> groups(lookahead_group_ + 1);
  const re2::StringPiece whole(text.data(), text.size());
  if (!regex_->Match(whole, begin, end, re2::RE2::ANCHOR_BOTH, groups.data(),
                     static_cast<int>(groups.size())) ||
      groups[lookahead_group_].data() == nullptr) {
    return end;
  }
  return last;
}

std::vector<std::pair<SplitPattern::Span, bool>> SplitPattern::Partition(
    absl::string_view text) const {
  std::vector<std::pair<Span, bool>> parts;
  if (text.empty()) {
    parts.push_back({{0, 0}, false});
    return parts;
  }
  size_t previous = 0;
  for (const Span& match : FindMatches(text)) {
    if (match.first != previous)
      parts.push_back({{previous, match.first}, false});
    parts.push_back({match, true});
    previous = match.second;
  }
  if (previous != text.size())
    parts.push_back({{previous, text.size()}, false});
  return parts;
}

}  // namespace castserve::text
