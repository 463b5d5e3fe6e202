// UTF-8 helpers and the character classes the tokenizers' normalizers and
// pre-tokenizers use, defined as Hugging Face's `tokenizers` (Rust) defines
// them, on top of ICU (libicu-dev).
//
// `tokenizers` takes some classes from Rust's standard library (White_Space,
// lower-casing: the current Unicode version) and others from a crate whose
// tables are Unicode 8.0 (control/format, punctuation, non-spacing marks):
// the latter are ICU's category restricted to characters assigned by Unicode
// 8.0, so that a character added later is, as there, in none of them.
//
// Stateless; every function is thread-safe.
#ifndef CASTSERVE_TEXT_UNICODE_UNICODE_H_
#define CASTSERVE_TEXT_UNICODE_UNICODE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text {

bool IsValidUtf8(absl::string_view text);

// The code point starting at text[*pos]; advances *pos past it. `text` must
// be valid UTF-8 and *pos < text.size() at a code point's first byte.
char32_t NextCodePoint(absl::string_view text, size_t* pos);

// Bytes of the UTF-8 sequence that starts with `lead` (1 to 4).
inline size_t Utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void AppendUtf8(char32_t c, std::string* out);

// `bytes` with each ill-formed part (maximal subpart, as Rust's
// String::from_utf8_lossy) replaced by U+FFFD.
std::string Utf8Lossy(absl::string_view bytes);

// Code points in valid UTF-8 `text`.
size_t CodePointCount(absl::string_view text);

// Unicode White_Space (Rust's char::is_whitespace).
bool IsWhitespace(char32_t c);
// BertNormalizer's clean_text drops these: Cc, Cf, Co (Unicode 8.0) but
// not \t, \n, \r.
bool IsBertControl(char32_t c);
// BertPreTokenizer's punctuation: ASCII punctuation or P* (Unicode 8.0).
bool IsBertPunctuation(char32_t c);
// BertNormalizer's handle_chinese_chars: the CJK ideograph blocks.
bool IsChineseChar(char32_t c);
// Mn (Unicode 8.0): what strip_accents removes after NFD.
bool IsNonspacingMark(char32_t c);

// Appends the full lower-case mapping of `c` taken alone (no context, as
// Rust's char::to_lowercase): "İ" becomes "i̇", "Σ" becomes "σ".
void AppendLowercase(char32_t c, std::string* out);

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` (valid UTF-8) in the normalization form; InvalidArgument past
// 2 GiB (ICU's int32 lengths), Internal if ICU fails.
absl::StatusOr<std::string> NormalizeUnicode(absl::string_view text,
                                             NormalizationForm form);

// The byte offsets where the extended grapheme clusters (UAX #29, ICU's
// Unicode version) of `text` (valid UTF-8) end, in order; the last is
// text.size(). InvalidArgument past 2 GiB, Internal if ICU fails.
absl::StatusOr<std::vector<size_t>> GraphemeEnds(absl::string_view text);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_UNICODE_UNICODE_H_
