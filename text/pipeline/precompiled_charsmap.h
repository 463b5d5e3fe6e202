// tokenizer.json's "Precompiled" normalizer: the rewrite table SentencePiece
// compiles into a model (normalizer_spec.precompiled_charsmap, e.g. its
// nmt_nfkc rules), applied as the `tokenizers` library applies it.
//
// The blob is a little-endian uint32 byte size of a Darts double-array trie,
// that many bytes of trie units (uint32 each), then the replacement strings,
// each ended by a NUL. A trie key is the UTF-8 of the text to replace; the
// value at its leaf is the byte offset of the replacement.
//
// `tokenizers` rewrites the text grapheme by grapheme (extended grapheme
// clusters): a grapheme shorter than 6 bytes with a trie key among its
// prefixes becomes the replacement of the shortest such prefix (the rest of
// the grapheme is dropped); otherwise each character is replaced by its own
// entry, or kept.
//
// Immutable after Create; Normalize is thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_PRECOMPILED_CHARSMAP_H_
#define CASTSERVE_TEXT_PIPELINE_PRECOMPILED_CHARSMAP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text {

class PrecompiledCharsmap {
 public:
  // InvalidArgument naming `path` for a blob too short for its trie size, a
  // trie size that is not whole units, replacements that are not UTF-8, or
  // a trie leaf whose value is not the start of a replacement. Every key
  // the trie holds is visited once here, so lookups stay in bounds.
  static absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> Create(
      absl::string_view blob, absl::string_view path);

  // `text` (valid UTF-8) rewritten; valid UTF-8. Fails only as
  // GraphemeEnds (unicode.h) does.
  absl::StatusOr<std::string> Normalize(absl::string_view text) const;

  // The replacement of the shortest trie key that prefixes `key`; nullopt
  // when none does. The lookup stops at a NUL byte, as the library's does.
  std::optional<absl::string_view> Transform(absl::string_view key) const;

 private:
  PrecompiledCharsmap(std::vector<uint32_t> units, std::string replacements);
  absl::Status CheckLeaves(absl::string_view path) const;
  // The trie position after following `label` from `position`; nullopt
  // when there is no such edge.
  std::optional<uint32_t> Child(uint32_t position, unsigned char label) const;

  const std::vector<uint32_t> units_;
  const std::string replacements_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_PRECOMPILED_CHARSMAP_H_
