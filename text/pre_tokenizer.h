// tokenizer.json's "pre_tokenizer": cuts normalized text into the words the
// model tokenizes one by one (BertPreTokenizer, ByteLevel, Split, Whitespace,
// WhitespaceSplit, Punctuation, Sequence), with the `tokenizers` library's
// semantics. ByteLevel also maps each word's bytes to the byte-level
// alphabet (byte_level.h).
//
// Immutable after Create; PreTokenize is thread-safe.
#ifndef CASTSERVE_TEXT_PRE_TOKENIZER_H_
#define CASTSERVE_TEXT_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/split_pattern.h"
#include "text/tokenizer_json.h"

namespace castserve::text {

// Split's behaviours over a partition (SplitPattern::Partition): the spans
// kept, in order, without empty ones.
std::vector<SplitPattern::Span> ApplySplitBehavior(
    const std::vector<std::pair<SplitPattern::Span, bool>>& parts,
    PreTokenizerSpec::Behavior behavior, bool invert);

class PreTokenizer {
 public:
  // InvalidArgument naming the field for a pattern RE2 rejects.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      const PreTokenizerSpec& spec);

  // Appends the words of `text` (valid UTF-8) to *words.
  void PreTokenize(absl::string_view text,
                   std::vector<std::string>* words) const;

 private:
  struct Step {
    PreTokenizerSpec spec;  // without the children of a Sequence
    std::unique_ptr<SplitPattern> pattern;  // Split, Whitespace, ByteLevel
  };
  PreTokenizer() = default;
  absl::Status AddSteps(const PreTokenizerSpec& spec);
  void Apply(const Step& step, absl::string_view piece,
             std::vector<std::string>* out) const;

  std::vector<Step> steps_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PRE_TOKENIZER_H_
