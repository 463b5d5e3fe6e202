// tokenizer.json's "normalizer": the text rewrites applied before
// pre-tokenization (BertNormalizer, NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// StripAccents, Replace, Prepend, Precompiled, Sequence), with the
// semantics of the
// `tokenizers` library. Offsets are not tracked: castserve needs only ids.
//
// Immutable after Create; Normalize is thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_NORMALIZER_H_
#define CASTSERVE_TEXT_PIPELINE_NORMALIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/pipeline/precompiled_charsmap.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/unicode/split_pattern.h"

namespace castserve::text {

class Normalizer {
 public:
  // InvalidArgument naming the field for a Replace pattern RE2 rejects or a
  // Precompiled charsmap that does not parse (precompiled_charsmap.h).
  static absl::StatusOr<std::unique_ptr<Normalizer>> Create(
      const NormalizerSpec& spec);

  // `text` must be valid UTF-8; so is the result.
  absl::StatusOr<std::string> Normalize(absl::string_view text) const;

 private:
  struct Step {
    NormalizerSpec spec;  // without the children of a Sequence
    std::unique_ptr<SplitPattern> pattern;          // Replace
    std::unique_ptr<PrecompiledCharsmap> charsmap;  // Precompiled
  };
  Normalizer() = default;
  absl::Status AddSteps(const NormalizerSpec& spec);
  absl::StatusOr<std::string> Apply(const Step& step, std::string text) const;

  std::vector<Step> steps_;
};

// BertNormalizer's rewrite, exposed for tests.
absl::StatusOr<std::string> BertNormalize(absl::string_view text,
                                          const NormalizerSpec& spec);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_NORMALIZER_H_
