// The Llama family of decoder-only language models: LlamaForCausalLM and
// the Mistral and Qwen2 configurations of the same network (grouped-query
// attention, rotary embeddings with optional Llama 3 scaling, RMSNorm, a
// gated SiLU MLP, optional attention biases, optional tied embeddings,
// Mistral's sliding window).
//
// Signature: input_ids INT64 [batch, seq] and attention_mask INT64
// [batch, seq] (optional, 1 = token, 0 = padding; absent = all tokens) ->
// logits FLOAT [batch, seq, vocab_size], f32 whatever the compute dtype.
// Model::Run is one forward pass. Positions are 0..seq-1 in every row, as
// transformers uses when no position_ids are given: pad on the right for
// results independent of the padding. The model is also an
// IncrementalDecoder (models/incremental_decoder.h): decode steps over a
// per-sequence KV cache, for models/generation.h.
//
// The module tree carries the checkpoint's dotted names
// ("model.layers.3.self_attn.q_proj") and kinds named after the model type
// ("LlamaAttention", "MistralDecoderLayer", "Qwen2MLP", ...). With tied
// embeddings, "lm_head" owns no weight: its forward runs inside the
// embedding module's hooks and multiplies by "model.embed_tokens.weight".
#ifndef CASTSERVE_MODELS_LLAMA_H_
#define CASTSERVE_MODELS_LLAMA_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "casting/checkpoint.h"
#include "models/hf_config.h"
#include "models/layers.h"
#include "models/model.h"
#include "models/rotary.h"
#include "models/weight_factory.h"

namespace castserve::models {

// The hyperparameters read from config.json.
struct LlamaConfig {
  std::string model_type;  // "llama", "mistral" or "qwen2".
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  Activation hidden_act = Activation::kSilu;
  RopeOptions rope;
  bool qkv_bias = false;     // Llama's attention_bias; always on for Qwen2.
  bool o_proj_bias = false;  // Llama's attention_bias; never for Qwen2.
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  int64_t sliding_window = 0;  // Mistral; 0 = unlimited.

  // Reads the fields with transformers' defaults where config.json may omit
  // them, the sizes range-checked (HfConfig::GetSize). InvalidArgument
  // naming the key for a size out of range, an unknown model type,
  // inconsistent head counts, an unsupported rope_scaling or activation.
  static absl::StatusOr<LlamaConfig> FromHf(const HfConfig& config);
};

// The model types this file serves.
inline constexpr const char* kLlamaFamilyModelTypes[] = {"llama", "mistral",
                                                         "qwen2"};

// Builds the model from `config` and `weights`; reads checkpoint headers
// only (unless the policy is eager). Errors name the missing key or the
// weight whose shape disagrees with the config. The model is immutable and
// its Forward thread-safe.
absl::StatusOr<std::unique_ptr<Model>> CreateLlamaForCausalLM(
    const LlamaConfig& config, const WeightFactory& weights);

// The ArchitectureFactory registered for "llama", "mistral" and "qwen2".
absl::StatusOr<std::unique_ptr<Model>> CreateLlamaFamilyModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LLAMA_H_
