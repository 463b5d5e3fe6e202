#include "text/unicode/byte_level.h"

#include <array>

#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

bool StandsForItself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

struct Alphabet {
  std::array<std::string, 256> utf8;  // byte -> its character, encoded
  std::array<char32_t, 256> code_point;

  Alphabet() {
    char32_t next = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      code_point[byte] =
          StandsForItself(byte) ? static_cast<char32_t>(byte) : next++;
      AppendUtf8(code_point[byte], &utf8[byte]);
    }
  }
};

const Alphabet& GetAlphabet() {
  static const Alphabet* const alphabet = new Alphabet();
  return *alphabet;
}

}  // namespace

void AppendByteLevel(absl::string_view text, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  for (char byte : text)
    out->append(alphabet.utf8[static_cast<unsigned char>(byte)]);
}

std::optional<unsigned char> ByteOfCharacter(char32_t c) {
  if (c < 0x100) {
    if (StandsForItself(static_cast<int>(c)))
      return static_cast<unsigned char>(c);
    return std::nullopt;
  }
  if (c >= 0x100 + 68) return std::nullopt;
  const Alphabet& alphabet = GetAlphabet();
  for (int byte = 0; byte < 256; ++byte) {
    if (alphabet.code_point[byte] == c) return static_cast<unsigned char>(byte);
  }
  return std::nullopt;
}

}  // namespace castserve::text
