#include "platform/length_prefixed.h"

#include <cstdint>
#include <cstring>

namespace castserve::platform {

std::optional<std::vector<std::string>> SplitLengthPrefixed(
    absl::string_view raw) {
  std::vector<std::string> elements;
  while (!raw.empty()) {
    if (raw.size() < 4) return std::nullopt;
    uint32_t length = 0;
    std::memcpy(&length, raw.data(), 4);
    raw.remove_prefix(4);
    if (length > raw.size()) return std::nullopt;
    elements.emplace_back(raw.substr(0, length));
    raw.remove_prefix(length);
  }
  return elements;
}

void AppendLengthPrefixed(absl::string_view element, std::string* raw) {
  const uint32_t length = static_cast<uint32_t>(element.size());
  raw->append(reinterpret_cast<const char*>(&length), 4);
  raw->append(element.data(), element.size());
}

std::string JoinLengthPrefixed(const std::vector<std::string>& elements) {
  std::string raw;
  for (const std::string& element : elements) {
    AppendLengthPrefixed(element, &raw);
  }
  return raw;
}

}  // namespace castserve::platform
