// tokenizer.json's "decoder": tokens back to text (WordPiece, ByteLevel,
// Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence), with the
// `tokenizers` library's semantics: each decoder maps the list of token
// strings to a new list, and the result is their concatenation. Without a
// decoder the tokens are joined with spaces.
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_DECODER_H_
#define CASTSERVE_TEXT_PIPELINE_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/unicode/split_pattern.h"

namespace castserve::text {

class Decoder {
 public:
  // `spec` may be null. InvalidArgument naming the field for a Replace
  // pattern that does not compile.
  static absl::StatusOr<std::unique_ptr<Decoder>> Create(
      const DecoderSpec* spec);

  // Valid UTF-8 (ill-formed bytes become U+FFFD).
  std::string Decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    DecoderSpec spec;  // without the children of a Sequence
    std::unique_ptr<SplitPattern> pattern;  // Replace
  };
  Decoder() = default;
  absl::Status AddSteps(const DecoderSpec& spec);
  std::vector<std::string> Apply(const Step& step,
                                 std::vector<std::string> tokens) const;

  bool has_spec_ = false;
  std::vector<Step> steps_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_DECODER_H_
