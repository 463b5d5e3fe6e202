// Gemma 3 text (Gemma3ForCausalLM, model_type "gemma3_text"): sliding and
// global layers as layer_types (or every sliding_window_pattern-th layer
// global) say, each kind with its own rotary table (rope_parameters per
// layer type; legacy rope_theta / rope_local_base_freq / rope_scaling),
// embeddings scaled by sqrt(hidden_size), RMSNorms with the +1 offset
// around attention and MLP (before and after each), q/k norms per head,
// scores scaled by query_pre_attn_scalar^-1/2, optional final-logit
// soft-capping, a GELU-tanh gated MLP, tied embeddings.
//
// attn_logit_softcapping is not applied: transformers 5's Gemma3Attention
// keeps the field but never passes it to its attention functions (Gemma 2
// did), and Gemma 3's released configs leave it null.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

constexpr int kGlobalRope = 0;
constexpr int kLocalRope = 1;

// The two rotary tables: rope_parameters' "full_attention" and
// "sliding_attention" objects, or the legacy top-level fields.
absl::Status ReadRopes(const HfConfig& config, DecoderSpec& spec) {
  absl::StatusOr<HfConfig> nested = config.GetObject("rope_parameters");
  if (!nested.ok() && !absl::IsNotFound(nested.status())) {
    return nested.status();
  }
  std::vector<DecoderRope> ropes;
  for (const char* type : {"full_attention", "sliding_attention"}) {
    const bool global = ropes.empty();
    absl::StatusOr<DecoderRope> rope;
    if (nested.ok()) {
      auto object = nested->GetObject(type);
      if (!object.ok()) return object.status();
      rope =
          ReadDecoderRope(*object, config, spec.head_dim, global ? 1e6 : 1e4);
    } else if (global) {
      auto scaling = config.GetObject("rope_scaling");
      if (!scaling.ok() && !absl::IsNotFound(scaling.status())) {
        return scaling.status();
      }
      auto theta = config.GetDouble("rope_theta", 1e6);
      if (!theta.ok()) return theta.status();
      rope = ReadDecoderRope(scaling.ok() ? *scaling : config, config,
                             spec.head_dim, *theta);
    } else {
      auto theta = config.GetDouble("rope_local_base_freq", 1e4);
      if (!theta.ok()) return theta.status();
      DecoderRope local;
      local.options.head_dim = spec.head_dim;
      local.options.theta = *theta;
      rope = local;
    }
    if (!rope.ok()) return rope.status();
    ropes.push_back(*std::move(rope));
  }
  spec.ropes = std::move(ropes);
  return absl::OkStatus();
}

absl::Status ReadLayers(const HfConfig& config, DecoderSpec& spec) {
  auto window = config.GetSize("sliding_window", 4096);
  auto pattern = config.GetInt("sliding_window_pattern", 6);
  auto bidirectional = config.GetBool("use_bidirectional_attention", false);
  if (!window.ok()) return window.status();
  if (!pattern.ok()) return pattern.status();
  if (!bidirectional.ok()) return bidirectional.status();
  if (*bidirectional || *pattern <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(),
                     ": use_bidirectional_attention and a "
                     "sliding_window_pattern <= 0 are not supported"));
  }
  std::vector<bool> fallback;
  for (int64_t i = 0; i < spec.num_hidden_layers; ++i) {
    fallback.push_back((i + 1) % *pattern != 0);
  }
  auto sliding = ReadSlidingLayers(config, spec.num_hidden_layers, fallback);
  if (!sliding.ok()) return sliding.status();
  for (bool slides : *sliding) {
    spec.layers.push_back(slides ? DecoderLayerAttention{*window, kLocalRope}
                                 : DecoderLayerAttention{0, kGlobalRope});
  }
  return absl::OkStatus();
}

absl::StatusOr<DecoderSpec> ReadGemma3Spec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "gemma3_text";
  spec.class_prefix = "Gemma3";
  spec.norm = DecoderNorm::kRmsPlusOne;
  DecoderTensorNames& names = spec.names;
  names.q_norm = "q_norm";
  names.k_norm = "k_norm";
  names.attention_out_norm = "post_attention_layernorm";
  names.mlp_in_norm = "pre_feedforward_layernorm";
  names.mlp_out_norm = "post_feedforward_layernorm";
  absl::Status status = ReadDecoderBasics(config, spec, "hidden_activation",
                                          "gelu_pytorch_tanh", true);
  if (!status.ok()) return status;
  auto bias = config.GetBool("attention_bias", false);
  auto scalar = config.GetDouble("query_pre_attn_scalar", 256);
  auto final_cap = ReadOptionalPositive(config, "final_logit_softcapping");
  for (const absl::Status& s :
       {bias.status(), scalar.status(), final_cap.status()}) {
    if (!s.ok()) return s;
  }
  if (!(*scalar > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(),
                     ": query_pre_attn_scalar must be "
                     "positive, got ",
                     *scalar));
  }
  spec.qkv_bias = spec.o_bias = *bias;
  spec.attention_scale = 1.0 / std::sqrt(*scalar);
  spec.final_logit_softcap = *final_cap;
  spec.embedding_scale = std::sqrt(static_cast<double>(spec.hidden_size));
  status = ReadRopes(config, spec);
  if (status.ok()) status = ReadLayers(config, spec);
  if (!status.ok()) return status;
  return spec;
}

const DecoderRegistration kRegistration("gemma3_text", &ReadGemma3Spec);

}  // namespace
}  // namespace castserve::models
