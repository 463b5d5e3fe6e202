// tokenizer.json's "added_tokens": tokens matched in the text before the
// model sees it, as the `tokenizers` library matches them. Those with
// "normalized": false (the special ones by default) are cut out of the raw
// text before normalization; the others are matched, in their normalized
// form, in the normalized text. Matching is leftmost-longest and
// non-overlapping; "single_word" discards a match touching a word character
// on either side, "lstrip"/"rstrip" make the token swallow the whitespace
// before/after it.
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_ADDED_VOCABULARY_H_
#define CASTSERVE_TEXT_PIPELINE_ADDED_VOCABULARY_H_

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/pipeline/normalizer.h"
#include "text/pipeline/tokenizer_json.h"

namespace castserve::text {

class AddedVocabulary {
 public:
  // A piece of the split text: an added token (id >= 0) or text to
  // tokenize (id < 0), bytes [begin, end) of the text.
  struct Segment {
    int64_t id;
    size_t begin;
    size_t end;
  };

  // `normalizer` (may be null) normalizes the contents of normalized tokens.
  static absl::StatusOr<std::unique_ptr<AddedVocabulary>> Create(
      const std::vector<AddedTokenSpec>& tokens, const Normalizer* normalizer);

  // `text` cut at the tokens matched on raw (`normalized` false) or on
  // normalized text; the segments cover `text` in order (text segments are
  // non-empty).
  std::vector<Segment> Split(absl::string_view text, bool normalized) const;

  std::optional<int64_t> Find(absl::string_view content) const;
  // The added token with `id`, or null.
  const AddedTokenSpec* Token(int64_t id) const;
  // The largest added token id + 1 (0 without added tokens).
  int64_t id_end() const { return id_end_; }

 private:
  struct Matcher {
    absl::flat_hash_map<std::string, size_t> token_by_content;
    std::vector<size_t> lengths;  // longest first
    std::bitset<256> first_bytes;
  };
  struct Match {
    size_t token;
    size_t begin;
    size_t end;
  };
  AddedVocabulary() = default;
  static void AddPattern(std::string content, size_t token, Matcher* matcher);
  std::optional<Match> NextMatch(const Matcher& matcher, absl::string_view text,
                                 size_t from) const;

  std::vector<AddedTokenSpec> tokens_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  absl::flat_hash_map<int64_t, size_t> by_id_;
  Matcher raw_;
  Matcher normalized_;
  int64_t id_end_ = 0;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_ADDED_VOCABULARY_H_
