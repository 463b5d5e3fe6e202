// XLM-RoBERTa (XLMRobertaModel, model_type "xlm-roberta"): BERT's layers
// with RoBERTa's positions — padding_idx (pad_token_id, default 1) + 1 + the
// count of non-padding tokens so far, padding_idx at padding — so the
// position table holds padding_idx + 1 positions more than the longest
// input; one token type. Keys are XLMRobertaModel's, or under "roberta."
// in a checkpoint with a head: XLMRobertaForMaskedLM serves the encoder
// (its "lm_head." is not run), XLMRobertaForSequenceClassification serves
// its classifier's scores (a cross-encoder such as bge-reranker: the first
// token through classifier.dense, tanh, classifier.out_proj).
#include "absl/strings/str_cat.h"
#include "models/encoders/encoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<EncoderSpec> ReadXlmRobertaSpec(const HfConfig& config) {
  EncoderSpec spec;
  spec.model_type = "xlm-roberta";
  spec.class_prefix = "XLMRoberta";
  spec.key_prefixes = {"", "roberta."};
  spec.type_vocab_size = 1;
  spec.positions = EncoderPositions::kAfterPadding;
  absl::Status status = ReadEncoderBasics(config, spec);
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> pad = config.GetInt("pad_token_id", 1);
  if (!pad.ok()) return pad.status();
  if (*pad < 0 || *pad + 1 >= spec.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": pad_token_id ", *pad, " leaves no position in ",
        "max_position_embeddings ", spec.max_position_embeddings));
  }
  spec.padding_idx = *pad;
  absl::StatusOr<bool> classifier = IsSequenceClassifier(config, "XLMRoberta");
  if (!classifier.ok()) return classifier.status();
  if (!*classifier) {
    spec.unserved_key_prefixes = {"lm_head."};
    return spec;
  }
  absl::StatusOr<std::vector<std::string>> labels =
      ReadClassifierLabels(config);
  if (!labels.ok()) return labels.status();
  spec.head = EncoderHead::kFirstTokenClassifier;
  spec.labels = *std::move(labels);
  return spec;
}

const EncoderRegistration kRegistration("xlm-roberta", &ReadXlmRobertaSpec);

}  // namespace
}  // namespace castserve::models
