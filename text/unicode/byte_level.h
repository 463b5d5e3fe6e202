// The byte-level BPE alphabet (GPT-2's): every byte stands for one visible
// character, so that any UTF-8 text becomes a string over 256 characters.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for the code point of the
// same value; the other 68 bytes, in increasing order, for U+0100, U+0101, ...
#ifndef CASTSERVE_TEXT_UNICODE_BYTE_LEVEL_H_
#define CASTSERVE_TEXT_UNICODE_BYTE_LEVEL_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace castserve::text {

// Appends the alphabet's characters (UTF-8) for the bytes of `text`.
void AppendByteLevel(absl::string_view text, std::string* out);

// The byte a character of the alphabet stands for; nullopt for any other.
std::optional<unsigned char> ByteOfCharacter(char32_t c);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_UNICODE_BYTE_LEVEL_H_
