#include "text/unicode/unicode.h"

#include <unicode/brkiter.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text {
namespace {

// Whether `c` was assigned by Unicode 8.0 (the tables of the Rust crate
// `tokenizers` takes its categories from).
bool AssignedByUnicode8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] != 0 && age[0] <= 8;
}

int8_t Category(char32_t c) { return u_charType(static_cast<UChar32>(c)); }

// Characters whose category changed after Unicode 8.0, with their 8.0 one
// (found by bert_characters_test, which checks every code point).
bool WasPunctuationInUnicode8(char32_t c) {
  return c == 0x166D || c == 0x111C9;
}
bool WasNonspacingMarkInUnicode8(char32_t c) { return c == 0x1734; }
bool BecameNonspacingMarkAfterUnicode8(char32_t c) {
  return c == 0x1885 || c == 0x1886 || c == 0xA9BD || c == 0x111C9;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  while (i < n) {
    if (bytes[i] < 0x80) {
      ++i;
      continue;
    }
    UChar32 c;
    U8_NEXT(bytes, i, n, c);
    if (c < 0) return false;
  }
  return true;
}

char32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  UChar32 c;
  U8_NEXT_UNSAFE(bytes, *pos, c);
  return static_cast<char32_t>(c);
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Lossy(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const size_t begin = i;
    UChar32 c;
    U8_NEXT(data, i, n, c);
    if (c < 0) {
      out.append("\xEF\xBF\xBD");
    } else {
      absl::StrAppend(&out, bytes.substr(begin, i - begin));
    }
  }
  return out;
}

size_t CodePointCount(absl::string_view text) {
  size_t count = 0;
  for (char byte : text) {
    if ((static_cast<unsigned char>(byte) & 0xC0) != 0x80) ++count;
  }
  return count;
}

bool IsWhitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool IsBertControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  const int8_t category = Category(c);
  const bool other = category == U_CONTROL_CHAR || category == U_FORMAT_CHAR ||
                     category == U_PRIVATE_USE_CHAR;
  return other && AssignedByUnicode8(c);
}

bool IsBertPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) ||
           (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  }
  if (WasPunctuationInUnicode8(c)) return true;
  switch (Category(c)) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      return AssignedByUnicode8(c);
    default:
      return false;
  }
}

bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool IsNonspacingMark(char32_t c) {
  if (c < 0x300) return false;
  if (WasNonspacingMarkInUnicode8(c)) return true;
  if (BecameNonspacingMarkAfterUnicode8(c)) return false;
  return Category(c) == U_NON_SPACING_MARK && AssignedByUnicode8(c);
}

void AppendLowercase(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  const auto code = static_cast<UChar32>(c);
  if (!u_hasBinaryProperty(code, UCHAR_CHANGES_WHEN_LOWERCASED)) {
    AppendUtf8(c, out);
    return;
  }
  UChar source[2];
  int32_t source_length = 0;
  U16_APPEND_UNSAFE(source, source_length, code);
  UChar lowered[8];
  UErrorCode error = U_ZERO_ERROR;
  const int32_t length =
      u_strToLower(lowered, 8, source, source_length, "", &error);
  if (U_FAILURE(error) || length > 8) {  // no mapping is that long
    AppendUtf8(c, out);
    return;
  }
  for (int32_t i = 0; i < length;) {
    UChar32 unit;
    U16_NEXT(lowered, i, length, unit);
    AppendUtf8(static_cast<char32_t>(unit), out);
  }
}

absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             NormalizationForm form) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalizationForm::kNfc:
      normalizer = icu::Normalizer2::getNFCInstance(error);
      break;
    case NormalizationForm::kNfd:
      normalizer = icu::Normalizer2::getNFDInstance(error);
      break;
    case NormalizationForm::kNfkc:
      normalizer = icu::Normalizer2::getNFKCInstance(error);
      break;
    case NormalizationForm::kNfkd:
      normalizer = icu::Normalizer2::getNFKDInstance(error);
      break;
  }
  if (U_FAILURE(error)) {
    return absl::InternalError(
        absl::StrCat("ICU normalizer: ", u_errorName(error)));
  }
  if (text.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("text longer than ICU's 2 GiB");
  }
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, error) && U_SUCCESS(error)) {
    return std::string(text);
  }
  error = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error)) {
    return absl::InternalError(
        absl::StrCat("ICU normalization: ", u_errorName(error)));
  }
  return out;
}

absl::StatusOr<std::vector<size_t>> GraphemeEnds(absl::string_view text) {
  if (text.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("text longer than ICU's 2 GiB");
  }
  std::vector<size_t> ends;
  if (text.empty()) return ends;
  UErrorCode error = U_ZERO_ERROR;
  // Making an iterator loads its rules; each thread keeps one.
  thread_local std::unique_ptr<icu::BreakIterator> iterator(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(),
                                                  error));
  if (iterator == nullptr || U_FAILURE(error)) {
    return absl::InternalError(
        absl::StrCat("ICU grapheme iterator: ", u_errorName(error)));
  }
  UText* utext = utext_openUTF8(nullptr, text.data(),
                                static_cast<int64_t>(text.size()), &error);
  iterator->setText(utext, error);
  if (U_SUCCESS(error)) {
    for (int32_t end = iterator->next(); end != icu::BreakIterator::DONE;
         end = iterator->next()) {
      ends.push_back(static_cast<size_t>(end));
    }
  }
  utext_close(utext);
  if (U_FAILURE(error)) {
    return absl::InternalError(
        absl::StrCat("ICU grapheme segmentation: ", u_errorName(error)));
  }
  return ends;
}

}  // namespace castserve::text
