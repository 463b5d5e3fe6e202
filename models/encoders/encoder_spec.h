// EncoderSpec: everything that tells one BERT-like encoder from another, as
// an architecture file (models/architectures/<model_type>.cc) states it: its
// hyperparameters (read from config.json), its position scheme, where its
// keys sit in the checkpoint and which head runs after it (none: the
// encoder's hidden states; a sequence classifier: one score per label).
// EncoderModel (encoder_model.h) builds any such model from it.
//
// Also the readers an architecture file calls for the fields every
// BERT-like config has, with transformers' defaults and errors that name the
// key. Pure functions of their arguments: thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_
#define CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "models/layers/activation.h"
#include "models/loading/hf_config.h"

namespace castserve::models {

// How position ids are made from input_ids.
enum class EncoderPositions {
  kAbsolute,      // 0..seq-1 in every row (BERT).
  kAfterPadding,  // padding_idx + 1 + the count of non-padding tokens up to
                  // and including each one; padding_idx at padding tokens
                  // (RoBERTa, XLM-RoBERTa).
};

// What runs after the encoder stack.
enum class EncoderHead {
  kNone,  // last_hidden_state and, with pooler weights, pooler_output.
  // BertForSequenceClassification: the pooler (dense + tanh over the first
  // token), then `classifier` (hidden -> labels).
  kPooledClassifier,
  // XLMRobertaForSequenceClassification: the first token through
  // `classifier.dense` (hidden -> hidden), tanh, `classifier.out_proj`
  // (hidden -> labels); the encoder has no pooler.
  kFirstTokenClassifier,
};

struct EncoderSpec {
  std::string model_type;    // "bert", "xlm-roberta".
  std::string class_prefix;  // "Bert", "XLMRoberta": kinds "BertLayer", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  Activation activation = Activation::kGelu;
  EncoderPositions positions = EncoderPositions::kAbsolute;
  int64_t padding_idx = 0;  // kAfterPadding: pad_token_id.
  // Where the encoder's keys may sit ("" for a bare model, "bert." or
  // "roberta." inside a model with a head), tried in order.
  std::vector<std::string> key_prefixes = {""};
  // Checkpoint keys starting so belong to heads the served model does not
  // run (a masked-LM head beside the encoder); any other key no module
  // reads is refused at load, naming it.
  std::vector<std::string> unserved_key_prefixes;
  EncoderHead head = EncoderHead::kNone;
  // A classifier's label names in label order (config.json's id2label).
  std::vector<std::string> labels;

  // The longest input: the position table, less the positions padding
  // takes before the first token (kAfterPadding).
  int64_t max_sequence_length() const;
};

// Reads vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size (required), max_position_embeddings and type_vocab_size
// (optional, the spec's defaults), each range-checked (HfConfig::GetSize);
// layer_norm_eps, hidden_act. InvalidArgument naming the key for a
// position_embedding_type other than "absolute", is_decoder or
// add_cross_attention set (an encoder serves neither), a hidden size not
// divisible by the head count.
absl::Status ReadEncoderBasics(const HfConfig& config, EncoderSpec& spec);

// True when config.json's "architectures" names
// "<class_prefix>ForSequenceClassification": the folder is a cross-encoder
// whose classifier must run. InvalidArgument when "architectures" is not a
// list of strings.
absl::StatusOr<bool> IsSequenceClassifier(const HfConfig& config,
                                          absl::string_view class_prefix);

// A classifier's labels: id2label ({"0": "LABEL_0", ...}, every id from 0
// to n-1 once) or, without it, num_labels (default 2) named "LABEL_<i>" as
// transformers names them; a problem_type other than transformers' three
// is refused. InvalidArgument naming the key.
absl::StatusOr<std::vector<std::string>> ReadClassifierLabels(
    const HfConfig& config);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_ENCODER_SPEC_H_
