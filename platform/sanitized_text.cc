#include "platform/sanitized_text.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace castserve::platform {
namespace {

constexpr absl::string_view kEllipsis = "...";

// Length of the well-formed UTF-8 sequence at the start of `text` (Unicode
// Table 3-7), or 0 when it is ill-formed.
size_t WellFormedLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length;
  uint8_t low = 0x80, high = 0xBF;  // Range of the second byte.
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // Overlong.
    if (lead == 0xED) high = 0x9F;  // Surrogates.
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // Overlong.
    if (lead == 0xF4) high = 0x8F;  // Above U+10FFFF.
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

// How the character of `length` bytes at the start of `text` is written.
std::string Piece(absl::string_view text, size_t length) {
  const auto lead = static_cast<uint8_t>(text[0]);
  if (length == 0) {
    return absl::StrCat("\\x", absl::Hex(lead, absl::kZeroPad2));
  }
  if (length == 1) {
    switch (lead) {
      case '\n':
        return "\\n";
      case '\r':
        return "\\r";
      case '\t':
        return "\\t";
    }
    if (lead < 0x20 || lead == 0x7F) {
      return absl::StrCat("\\x", absl::Hex(lead, absl::kZeroPad2));
    }
  }
  if (length == 2 && lead == 0xC2 && static_cast<uint8_t>(text[1]) < 0xA0) {
    return absl::StrCat(
        "\\u00", absl::Hex(static_cast<uint8_t>(text[1]), absl::kZeroPad2));
  }
  return std::string(text.substr(0, length));
}

}  // namespace

std::string SanitizeText(absl::string_view bytes, size_t max_bytes) {
  max_bytes = std::max(max_bytes, kEllipsis.size());
  std::string out;
  out.reserve(std::min(bytes.size(), max_bytes));
  size_t fits = 0;  // Output length up to which "..." still fits after it.
  for (size_t i = 0; i < bytes.size();) {
    const size_t length = WellFormedLength(bytes.substr(i));
    const std::string piece = Piece(bytes.substr(i), length);
    if (out.size() + piece.size() > max_bytes) {
      out.resize(fits);
      out.append(kEllipsis.data(), kEllipsis.size());
      return out;
    }
    out += piece;
    if (out.size() + kEllipsis.size() <= max_bytes) fits = out.size();
    i += std::max<size_t>(length, 1);
  }
  return out;
}

bool IsSanitized(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = WellFormedLength(text.substr(i));
    if (length == 0 || Piece(text.substr(i), length).size() != length) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace castserve::platform
