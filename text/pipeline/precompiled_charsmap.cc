#include "text/pipeline/precompiled_charsmap.h"

#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

// A Darts double-array unit: bits 0-7 the label of the edge into it (bit 31
// set on a leaf unit, which never matches a label), bit 8 "a key ends
// here", bits 10-31 the offset to its children (shifted by 8 more when bit
// 9 is set); a leaf unit's low 31 bits are its value.
bool HasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t Value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t Label(uint32_t unit) { return unit & 0x800000FFu; }
uint32_t Offset(uint32_t unit) {
  return (unit >> 10) << ((unit & (1u << 9)) >> 6);
}

// Graphemes at least this long are rewritten character by character.
constexpr size_t kWholeGraphemeBytes = 6;

}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(std::vector<uint32_t> units,
                                         std::string replacements)
    : units_(std::move(units)), replacements_(std::move(replacements)) {}

absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>>
PrecompiledCharsmap::Create(absl::string_view blob, absl::string_view path) {
  if (blob.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", blob.size(),
                     " bytes, fewer than the 4 of the trie's size"));
  }
  const uint32_t trie_bytes = absl::little_endian::Load32(blob.data());
  if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the trie's size ", trie_bytes,
                     " is not a positive multiple of 4 within the blob's ",
                     blob.size() - 4, " bytes"));
  }
  std::vector<uint32_t> units(trie_bytes / 4);
  for (size_t i = 0; i < units.size(); ++i) {
    units[i] = absl::little_endian::Load32(blob.data() + 4 + 4 * i);
  }
  std::string replacements(blob.substr(4 + trie_bytes));
  if (!IsValidUtf8(replacements)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the replacement strings are not UTF-8"));
  }
  std::unique_ptr<PrecompiledCharsmap> charsmap(
      new PrecompiledCharsmap(std::move(units), std::move(replacements)));
  if (absl::Status status = charsmap->CheckLeaves(path); !status.ok()) {
    return status;
  }
  return charsmap;
}

std::optional<uint32_t> PrecompiledCharsmap::Child(uint32_t position,
                                                   unsigned char label) const {
  const uint32_t next = position ^ label;
  if (next >= units_.size() || Label(units_[next]) != label) {
    return std::nullopt;
  }
  return next ^ Offset(units_[next]);
}

// Visits every position reachable from the root once; each key's leaf value
// must start a replacement (the replacements are UTF-8, so it runs to a NUL
// or the end as UTF-8 too). A position past the units still has children
// when XOR with a label brings it back below their count: positions are
// tracked up to the next multiple of 256.
absl::Status PrecompiledCharsmap::CheckLeaves(absl::string_view path) const {
  std::vector<bool> visited((units_.size() + 255) / 256 * 256, false);
  std::vector<uint32_t> pending{Offset(units_[0])};
  while (!pending.empty()) {
    const uint32_t position = pending.back();
    pending.pop_back();
    for (int label = 1; label < 256; ++label) {
      const uint32_t next = position ^ static_cast<uint32_t>(label);
      const std::optional<uint32_t> child =
          Child(position, static_cast<unsigned char>(label));
      if (!child.has_value()) continue;
      if (HasLeaf(units_[next])) {
        const uint32_t value =
            *child < units_.size() ? Value(units_[*child]) : UINT32_MAX;
        if (value > replacements_.size() ||
            (value < replacements_.size() &&
             (static_cast<unsigned char>(replacements_[value]) & 0xC0) ==
                 0x80)) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": a trie key's value does not start one of the ",
              replacements_.size(), " bytes of replacement strings"));
        }
      }
      if (*child < visited.size() && !visited[*child]) {
        visited[*child] = true;
        pending.push_back(*child);
      }
    }
  }
  return absl::OkStatus();
}

std::optional<absl::string_view> PrecompiledCharsmap::Transform(
    absl::string_view key) const {
  uint32_t position = Offset(units_[0]);
  for (const char byte : key) {
    const unsigned char label = static_cast<unsigned char>(byte);
    if (label == 0) break;
    const uint32_t next = position ^ label;
    const std::optional<uint32_t> child = Child(position, label);
    if (!child.has_value()) break;
    position = *child;
    if (HasLeaf(units_[next])) {
      // CheckLeaves saw this leaf: its value starts a replacement.
      const absl::string_view rest =
          absl::string_view(replacements_).substr(Value(units_[position]));
      return rest.substr(0, rest.find('\0'));
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::string> PrecompiledCharsmap::Normalize(
    absl::string_view text) const {
  absl::StatusOr<std::vector<size_t>> ends = GraphemeEnds(text);
  if (!ends.ok()) return ends.status();
  std::string out;
  out.reserve(text.size());
  size_t begin = 0;
  for (const size_t end : *ends) {
    const absl::string_view grapheme = text.substr(begin, end - begin);
    begin = end;
    if (grapheme.size() < kWholeGraphemeBytes) {
      if (std::optional<absl::string_view> replacement = Transform(grapheme)) {
        out.append(replacement->data(), replacement->size());
        continue;
      }
    }
    for (size_t i = 0; i < grapheme.size();) {
      const absl::string_view character = grapheme.substr(
          i, Utf8Length(static_cast<unsigned char>(grapheme[i])));
      i += character.size();
      const std::optional<absl::string_view> replacement = Transform(character);
      const absl::string_view chosen = replacement.value_or(character);
      out.append(chosen.data(), chosen.size());
    }
  }
  return out;
}

}  // namespace castserve::text
