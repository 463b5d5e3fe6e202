// tokenizer.json's "pre_tokenizer": cuts normalized text into the words the
// model tokenizes one by one (BertPreTokenizer, ByteLevel, Split, Whitespace,
// WhitespaceSplit, Punctuation, Metaspace, Sequence), with the `tokenizers`
// library's semantics. ByteLevel also maps each word's bytes to the byte-level
// alphabet (byte_level.h).
//
// Immutable after Create; PreTokenize is thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_PRE_TOKENIZER_H_
#define CASTSERVE_TEXT_PIPELINE_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/unicode/split_pattern.h"

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

  // A piece of the text between pre-tokenizers; `starts_text` when it
  // begins at the start of the encoded text (Metaspace's "first" scheme).
  struct Piece {
    std::string text;
    bool starts_text;
  };

  // Appends the words of `text` (valid UTF-8) to *words; `starts_text`: the
  // text begins the encoded text (no added token before it).
  void PreTokenize(absl::string_view text, std::vector<std::string>* words,
                   bool starts_text = true) const;

 private:
  struct Step {
    PreTokenizerSpec spec;  // without the children of a Sequence
    // Split, Whitespace, ByteLevel with use_regex, Metaspace with split
    std::unique_ptr<SplitPattern> pattern;
  };
  PreTokenizer() = default;
  absl::Status AddSteps(const PreTokenizerSpec& spec);
  void Apply(const Step& step, const Piece& piece,
             std::vector<Piece>* out) const;
  void ApplyByteLevel(const Step& step, const Piece& piece,
                      std::vector<Piece>* out) const;
  void ApplyMetaspace(const Step& step, const Piece& piece,
                      std::vector<Piece>* out) const;

  std::vector<Step> steps_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_PRE_TOKENIZER_H_
