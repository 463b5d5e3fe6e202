// BERT (BertModel, model_type "bert"): absolute positions 0..seq-1, token
// types, post-norm layers, the tanh pooler over the first token when the
// checkpoint has it. Keys are BertModel's, or under "bert." in a checkpoint
// saved from a model with a head: BertForMaskedLM / BertForPreTraining
// serve the encoder (their "cls." head is not run),
// BertForSequenceClassification serves its classifier's scores (a
// cross-encoder: pooler, then "classifier").
#include "models/encoders/encoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<EncoderSpec> ReadBertSpec(const HfConfig& config) {
  EncoderSpec spec;
  spec.model_type = "bert";
  spec.class_prefix = "Bert";
  spec.key_prefixes = {"", "bert."};
  absl::Status status = ReadEncoderBasics(config, spec);
  if (!status.ok()) return status;
  absl::StatusOr<bool> classifier = IsSequenceClassifier(config, "Bert");
  if (!classifier.ok()) return classifier.status();
  if (!*classifier) {
    spec.unserved_key_prefixes = {"cls."};
    return spec;
  }
  absl::StatusOr<std::vector<std::string>> labels =
      ReadClassifierLabels(config);
  if (!labels.ok()) return labels.status();
  spec.head = EncoderHead::kPooledClassifier;
  spec.labels = *std::move(labels);
  return spec;
}

const EncoderRegistration kRegistration("bert", &ReadBertSpec);

}  // namespace
}  // namespace castserve::models
