// BertModel (Hugging Face `model_type: "bert"`): token embeddings plus
// absolute position and token type embeddings, a stack of post-norm encoder
// layers with padding-masked self-attention, and the tanh pooler over the
// first token.
//
// Signature:
//   input_ids       int64 [batch, seq]
//   attention_mask  int64 [batch, seq], optional (all ones): 1 = token,
//                   0 = padding
//   token_type_ids  int64 [batch, seq], optional (all zeros)
//   -> last_hidden_state float32 [batch, seq, hidden]
//      pooler_output     float32 [batch, hidden] (only when the checkpoint
//                        has pooler weights)
// Layers compute in the weight policy's compute dtype; outputs are f32.
//
// Checkpoint keys are BertModel's, optionally under "bert." (a checkpoint
// saved from BertForMaskedLM and the like).
#ifndef CASTSERVE_MODELS_ENCODERS_BERT_H_
#define CASTSERVE_MODELS_ENCODERS_BERT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"

namespace castserve::models {

struct BertConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  std::string hidden_act = "gelu";

  // Reads config.json's values, the sizes range-checked (HfConfig::GetSize);
  // InvalidArgument for unsupported settings (a position_embedding_type
  // other than "absolute", a hidden size not divisible by the head count).
  static absl::StatusOr<BertConfig> FromHf(const HfConfig& config);
};

class BertEncoderStack;  // Defined in bert.cc.

class BertModel final : public Model {
 public:
  // Builds the module tree; reads no weight data unless options.eager.
  static absl::StatusOr<std::unique_ptr<BertModel>> Create(
      const HfConfig& config,
      std::shared_ptr<const casting::Checkpoint> checkpoint,
      const WeightPolicyOptions& options);
  ~BertModel() override;

  std::string architecture() const override { return "bert"; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override;
  casting::Device device() const override { return device_; }
  const BertConfig& config() const { return config_; }
  // The position table.
  std::optional<int64_t> max_sequence_length() const override {
    return config_.max_position_embeddings;
  }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override;

 private:
  BertModel(BertConfig config, std::unique_ptr<BertEncoderStack> root,
            casting::Device device);

  const BertConfig config_;
  const casting::Device device_;
  std::unique_ptr<BertEncoderStack> root_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_BERT_H_
