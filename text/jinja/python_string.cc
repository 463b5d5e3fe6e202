#include "text/jinja/python_string.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "text/jinja/lexer.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {

std::u32string ToCodePoints(absl::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) out += NextCodePoint(text, &pos);
  return out;
}

std::string FromCodePoints(const std::u32string& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(c, &out);
  return out;
}

std::string PythonStrip(absl::string_view text,
                        const std::optional<std::string>& chars,
                        StripSide side) {
  std::u32string s = ToCodePoints(text);
  std::u32string set = chars.has_value() ? ToCodePoints(*chars) : U"";
  auto strip = [&](char32_t c) {
    return chars.has_value() ? set.find(c) != std::u32string::npos
                             : IsPythonSpace(c);
  };
  size_t begin = 0, end = s.size();
  if (side != StripSide::kRight) {
    while (begin < end && strip(s[begin])) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && strip(s[end - 1])) --end;
  }
  return FromCodePoints(s.substr(begin, end - begin));
}

namespace {

// Python whitespace runs: [begin, end) pairs of the words between them.
std::vector<std::pair<size_t, size_t>> Words(const std::u32string& s) {
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsPythonSpace(s[i])) ++i;
    if (i == s.size()) break;
    size_t start = i;
    while (i < s.size() && !IsPythonSpace(s[i])) ++i;
    words.emplace_back(start, i);
  }
  return words;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PythonSplit(
    absl::string_view text, const std::optional<std::string>& sep,
    int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep.has_value()) {
    std::u32string s = ToCodePoints(text);
    auto words = Words(s);
    for (size_t i = 0; i < words.size(); ++i) {
      if (maxsplit >= 0 && static_cast<int64_t>(i) == maxsplit) {
        parts.push_back(PythonStrip(FromCodePoints(s.substr(words[i].first)),
                                    std::nullopt, StripSide::kRight));
        return parts;
      }
      parts.push_back(FromCodePoints(
          s.substr(words[i].first, words[i].second - words[i].first)));
    }
    return parts;
  }
  if (sep->empty()) return absl::InvalidArgumentError("empty separator");
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t found = text.find(*sep, start);
    if (found == absl::string_view::npos) break;
    parts.emplace_back(text.substr(start, found - start));
    start = found + sep->size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

absl::StatusOr<std::vector<std::string>> PythonRSplit(
    absl::string_view text, const std::optional<std::string>& sep,
    int64_t maxsplit) {
  if (maxsplit < 0 || !sep.has_value()) {
    if (maxsplit < 0) return PythonSplit(text, sep, maxsplit);
    return absl::UnimplementedError(
        "unsupported construct: rsplit() without a separator but with "
        "maxsplit");
  }
  if (sep->empty()) return absl::InvalidArgumentError("empty separator");
  std::vector<std::string> parts;
  size_t end = text.size();
  while (static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t found = text.rfind(*sep, end - sep->size());
    if (found == absl::string_view::npos) break;
    parts.emplace_back(
        text.substr(found + sep->size(), end - found - sep->size()));
    end = found;
  }
  parts.emplace_back(text.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string PythonReplace(absl::string_view text, absl::string_view old_text,
                          absl::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    std::u32string s = ToCodePoints(text);
    int64_t done = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_text.data(), new_text.size());
        ++done;
      }
      if (i < s.size()) AppendUtf8(s[i], &out);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = text.find(old_text, start);
    if (found == absl::string_view::npos) break;
    out.append(text.data() + start, found - start);
    out.append(new_text.data(), new_text.size());
    start = found + old_text.size();
    ++done;
  }
  out.append(text.data() + start, text.size() - start);
  return out;
}

namespace {

std::string ConvertCase(absl::string_view text, bool upper) {
  std::u32string code_points = ToCodePoints(text);
  std::u16string utf16;
  for (char32_t c : code_points) {
    if (c >= 0x10000) {
      utf16 += static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10));
      utf16 += static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF));
    } else {
      utf16 += static_cast<char16_t>(c);
    }
  }
  std::u16string result(utf16.size() * 3 + 4, u'\0');
  UErrorCode error = U_ZERO_ERROR;
  auto convert = upper ? u_strToUpper : u_strToLower;
  int32_t length = convert(reinterpret_cast<UChar*>(result.data()),
                           static_cast<int32_t>(result.size()),
                           reinterpret_cast<const UChar*>(utf16.data()),
                           static_cast<int32_t>(utf16.size()), "", &error);
  if (U_FAILURE(error)) return std::string(text);
  result.resize(length);
  std::string out;
  for (size_t i = 0; i < result.size(); ++i) {
    char32_t c = result[i];
    if (c >= 0xD800 && c < 0xDC00 && i + 1 < result.size()) {
      c = 0x10000 + ((c - 0xD800) << 10) + (result[++i] - 0xDC00);
    }
    AppendUtf8(c, &out);
  }
  return out;
}

std::string TitleOf(char32_t c) {
  std::string out;
  AppendUtf8(static_cast<char32_t>(u_totitle(static_cast<UChar32>(c))), &out);
  return out;
}

bool IsCased(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

}  // namespace

std::string PythonUpper(absl::string_view text) {
  return ConvertCase(text, true);
}

std::string PythonLower(absl::string_view text) {
  return ConvertCase(text, false);
}

std::string PythonTitle(absl::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : ToCodePoints(text)) {
    std::string one;
    AppendUtf8(c, &one);
    out += previous_cased ? PythonLower(one) : TitleOf(c);
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PythonCapitalize(absl::string_view text) {
  std::u32string s = ToCodePoints(text);
  if (s.empty()) return "";
  return TitleOf(s[0]) + PythonLower(FromCodePoints(s.substr(1)));
}

std::string JinjaTitle(absl::string_view text) {
  std::u32string s = ToCodePoints(text);
  auto is_delimiter = [](char32_t c) {
    return IsPythonSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' ||
           c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    bool delimiter = is_delimiter(s[i]);
    while (i < s.size() && is_delimiter(s[i]) == delimiter) ++i;
    std::u32string piece = s.substr(start, i - start);
    if (delimiter) {
      out += FromCodePoints(piece);
    } else {
      out += PythonUpper(FromCodePoints(piece.substr(0, 1))) +
             PythonLower(FromCodePoints(piece.substr(1)));
    }
  }
  return out;
}

}  // namespace castserve::text::jinja
