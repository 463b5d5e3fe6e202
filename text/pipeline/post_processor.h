// tokenizer.json's "post_processor" for one sequence or a pair: the special
// tokens around them and the type ids (TemplateProcessing's "single" and
// "pair" templates; BertProcessing as [CLS] A [SEP] and [CLS] A [SEP] B
// [SEP] with type 1 from B on; RobertaProcessing as <s> A </s> and <s> A
// </s> </s> B </s>, all type 0; ByteLevel only changes offsets, which
// castserve does not keep; Sequence of these, at most one of them adding
// tokens). Without a processor adding tokens a pair is A then B, B with type
// id 1, as the tokenizers library encodes it.
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
  // a sequence other than "A" in the single template, or a pair template
  // without "A" and "B" once each.
  static absl::StatusOr<std::unique_ptr<PostProcessor>> Create(
      const PostProcessorSpec* spec);

  // Tokens Apply adds with add_special_tokens (what truncation reserves).
  int64_t added_tokens() const { return Added(template_); }
  // False for a TemplateProcessing without a "pair" template.
  bool has_pair() const { return !pair_template_.empty(); }
  // Tokens ApplyPair adds with add_special_tokens; has_pair() only.
  int64_t added_pair_tokens() const { return Added(pair_template_); }

  // The encoding of a sequence of `ids`.
  Encoding Apply(const std::vector<int64_t>& ids,
                 bool add_special_tokens) const;
  // The encoding of the pair `a`, `b`; has_pair() only (the caller checks:
  // without a pair template the encoding is empty).
  Encoding ApplyPair(const std::vector<int64_t>& a,
                     const std::vector<int64_t>& b,
                     bool add_special_tokens) const;

 private:
  struct Piece {
    std::vector<int64_t> special_ids;  // empty for a sequence
    int sequence;                      // -1: special tokens; 0: A; 1: B
    int64_t type_id;
  };
  PostProcessor() = default;
  absl::Status AddSpec(const PostProcessorSpec& spec, int* adders);
  absl::Status AddTemplate(const PostProcessorSpec& spec);
  static int64_t Added(const std::vector<Piece>& pieces);
  static Encoding Fill(const std::vector<Piece>& pieces,
                       const std::vector<const std::vector<int64_t>*>& seqs,
                       bool add_special_tokens);

  std::vector<Piece> template_{{{}, 0, 0}};
  std::vector<Piece> pair_template_{{{}, 0, 0}, {{}, 1, 1}};
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_POST_PROCESSOR_H_
