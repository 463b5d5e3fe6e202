// tokenizer.json's "post_processor" for one sequence: the special tokens
// around it and the type ids (TemplateProcessing's "single" template,
// BertProcessing and RobertaProcessing as [CLS] A [SEP]; ByteLevel only
// changes offsets, which castserve does not keep; Sequence of these, at most
// one of them adding tokens).
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_POST_PROCESSOR_H_
#define CASTSERVE_TEXT_PIPELINE_POST_PROCESSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/tokenizer.h"

namespace castserve::text {

class PostProcessor {
 public:
  // Without a spec: no special tokens, type ids 0. InvalidArgument naming
  // the field for a template naming a special token it does not define, or
  // a sequence other than "A".
  static absl::StatusOr<std::unique_ptr<PostProcessor>> Create(
      const PostProcessorSpec* spec);

  // Tokens Apply adds with add_special_tokens (what truncation reserves).
  int64_t added_tokens() const { return added_tokens_; }

  // The encoding of a sequence of `ids`.
  Encoding Apply(const std::vector<int64_t>& ids,
                 bool add_special_tokens) const;

 private:
  struct Piece {
    std::vector<int64_t> special_ids;  // empty for the sequence
    bool is_sequence;
    int64_t type_id;
  };
  PostProcessor() = default;
  absl::Status AddSpec(const PostProcessorSpec& spec, int* adders);
  absl::Status AddTemplate(const PostProcessorSpec& spec);

  std::vector<Piece> template_{{{}, true, 0}};
  int64_t added_tokens_ = 0;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_POST_PROCESSOR_H_
