// DecoderSpec: everything that tells one decoder-only language model from
// another, as an architecture file (models/architectures/<model_type>.cc)
// states it: its hyperparameters (read from config.json), its tensor names
// and how the shared blocks are assembled (which norms sit where, fused or
// separate projections, per-layer attention windows and rotary tables).
// DecoderForCausalLM (decoder_model.h) builds any such model from it.
//
// Also the readers an architecture file calls for the fields most
// decoders share (sizes and head counts, the rotary settings, per-layer
// attention types), each with transformers' defaults and errors that name
// the key. Pure functions of their arguments: thread-safe.
#ifndef CASTSERVE_MODELS_DECODER_DECODER_SPEC_H_
#define CASTSERVE_MODELS_DECODER_DECODER_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/layers/activation.h"
#include "models/layers/rotary.h"
#include "models/loading/hf_config.h"

namespace castserve::models {

// The normalization of the residual stream and of per-head q/k.
enum class DecoderNorm {
  kRms,         // x / rms(x) * weight (Llama: cast to the input dtype first).
  kRmsPlusOne,  // x / rms(x) * (1 + weight), in f32 (Gemma).
};

// One rotary table: RopeOptions over the first `options.head_dim` columns
// of each head (partial rotary when smaller than the head), the cos/sin
// multiplied by `attention_factor`. LongRoPE (Phi-3): `short_factor` and
// `long_factor` divide the frequencies; the long ones apply to a forward
// whose last position is at or beyond `original_max_position_embeddings`.
struct DecoderRope {
  RopeOptions options;
  double attention_factor = 1.0;
  std::vector<double> short_factor;  // Empty: not LongRoPE.
  std::vector<double> long_factor;
};

// One decoder layer's attention: its window (0 = global) and rotary table
// (an index into DecoderSpec::ropes).
struct DecoderLayerAttention {
  int64_t sliding_window = 0;
  int rope = 0;
};

// The checkpoint names of the blocks (transformers' layout). A projection
// or norm with an empty name is absent; `qkv` and `gate_up` name fused
// products (then `q`/`k`/`v`, `gate`/`up` are unused).
struct DecoderTensorNames {
  std::string backbone = "model";
  std::string embed = "model.embed_tokens";
  std::string layers = "model.layers";
  std::string attention = "self_attn";
  std::string q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj";
  std::string qkv;             // Phi-3: "qkv_proj".
  std::string q_norm, k_norm;  // Per-head RMSNorm (Qwen3, Gemma 3).
  std::string mlp = "mlp";
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  std::string gate_up;  // Phi-3: "gate_up_proj", gate first.
  // The residual block: x + out_norm(attn(in_norm(x))), then
  // h + mlp_out_norm(mlp(mlp_in_norm(h))); an empty name is no norm.
  std::string attention_in_norm = "input_layernorm";
  std::string attention_out_norm;
  std::string mlp_in_norm = "post_attention_layernorm";
  std::string mlp_out_norm;
  std::string final_norm = "model.norm";
  std::string lm_head = "lm_head";
};

struct DecoderSpec {
  std::string model_type;    // "llama", "qwen3", ...
  std::string class_prefix;  // "Llama": kinds "LlamaAttention", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  // The longest sequence generation may grow to (0: the position table).
  int64_t max_generated_positions = 0;
  DecoderNorm norm = DecoderNorm::kRms;
  double norm_eps = 1e-6;
  Activation mlp_activation = Activation::kSilu;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  double attention_scale = 0;      // 0: 1 / sqrt(head_dim).
  double attention_softcap = 0;    // 0: none; else cap * tanh(s / cap).
  double embedding_scale = 0;      // 0: none (Gemma: sqrt(hidden_size)).
  double final_logit_softcap = 0;  // 0: none.
  bool tie_word_embeddings = false;
  std::vector<DecoderRope> ropes;             // At least one.
  std::vector<DecoderLayerAttention> layers;  // num_hidden_layers of them.
  DecoderTensorNames names;

  // InvalidArgument naming what is inconsistent (head counts, a layer's
  // rope index, a rope's options). Checked by DecoderForCausalLM::Create.
  absl::Status Validate() const;
};

// Reads vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: the attention heads),
// head_dim (default: hidden_size / heads), max_position_embeddings, each
// range-checked (HfConfig::GetSize), and checks that the heads divide.
absl::Status ReadDecoderSizes(const HfConfig& config, DecoderSpec& spec);

// The rotary settings of a config (or of one entry of a per-layer-type
// rope_parameters object): transformers 5's "rope_parameters" or the legacy
// "rope_theta" + "rope_scaling", rope types default, linear, llama3 and
// longrope, "partial_rotary_factor". `theta_default` where no theta is
// given; `root` is the whole config (for original_max_position_embeddings
// and max_position_embeddings outside the rope object). InvalidArgument
// naming an unsupported type or a bad field.
absl::StatusOr<DecoderRope> ReadDecoderRope(const HfConfig& rope_source,
                                            const HfConfig& root,
                                            int64_t head_dim,
                                            double theta_default);

// The rope of a config whose rope settings sit at its top level or in a
// flat "rope_parameters" object (Llama, Mistral, Qwen, Phi-3).
absl::StatusOr<DecoderRope> ReadFlatDecoderRope(const HfConfig& config,
                                                int64_t head_dim);

// config.json's "layer_types" ("full_attention" / "sliding_attention"), one
// per layer; `fallback` (one per layer) when absent. InvalidArgument naming
// the key for another length or an unknown type.
absl::StatusOr<std::vector<bool>> ReadSlidingLayers(
    const HfConfig& config, int64_t num_layers,
    const std::vector<bool>& fallback);

// ReadDecoderSizes, then "rms_norm_eps" (default 1e-6),
// "tie_word_embeddings" (default `tie_default`) and the MLP activation
// named by `activation_key` (default `activation_default`).
absl::Status ReadDecoderBasics(const HfConfig& config, DecoderSpec& spec,
                               absl::string_view activation_key = "hidden_act",
                               absl::string_view activation_default = "silu",
                               bool tie_default = false);

// Every layer attending within `sliding_window` (0 = globally) with rotary
// table 0.
void SetUniformLayers(DecoderSpec& spec, int64_t sliding_window);

// Reads `key` as a number, 0 when absent or null (an unset soft cap).
absl::StatusOr<double> ReadOptionalPositive(const HfConfig& config,
                                            absl::string_view key);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_DECODER_SPEC_H_
