// ModernBERT (ModernBertModel, model_type "modernbert"): token embeddings
// and a LayerNorm (no positions, no token types), pre-norm gated layers —
// LayerNorm (none before layer 0's attention), fused Wqkv with rotary q and
// k, Wo; LayerNorm, Wi holding the GeGLU's gate and up halves, Wo — and a
// final LayerNorm. Layers alternate global attention and local attention
// in a band of local_attention / 2 tokens each side, each kind with its own
// rotary theta. Biases as attention_bias / mlp_bias say (none by default);
// a LayerNorm's bias is read when the checkpoint holds it (norm_bias).
//
// Config as transformers 5 writes it (layer_types; rope_parameters per
// layer type) or as the hub's checkpoints do (global_attn_every_n_layers;
// global_rope_theta, local_rope_theta). Keys are ModernBertModel's, or under
// "model." beside ModernBertForMaskedLM's head (not run).
#include "absl/strings/str_cat.h"
#include "models/encoders/encoder_model.h"

namespace castserve::models {
namespace {

absl::Status Refuse(const HfConfig& config, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(config.label(), ": ", why));
}

// layer_types, or every n-th layer global (n = global_attn_every_n_layers).
absl::StatusOr<std::vector<bool>> ReadSlidingLayers(const HfConfig& config,
                                                    int64_t layers) {
  std::vector<bool> sliding;
  if (config.Has("layer_types")) {
    auto types = config.GetStringList("layer_types");
    if (!types.ok()) return types.status();
    if (static_cast<int64_t>(types->size()) != layers) {
      return Refuse(config, absl::StrCat("layer_types lists ", types->size(),
                                         " layers, not ", layers));
    }
    for (const std::string& type : *types) {
      if (type != "full_attention" && type != "sliding_attention") {
        return Refuse(config, absl::StrCat("layer_types holds '", type,
                                           "' (full_attention or "
                                           "sliding_attention)"));
      }
      sliding.push_back(type == "sliding_attention");
    }
    return sliding;
  }
  auto every = config.GetSize("global_attn_every_n_layers", 3);
  if (!every.ok()) return every.status();
  for (int64_t i = 0; i < layers; ++i) sliding.push_back(i % *every != 0);
  return sliding;
}

// rope_parameters[layer_type].rope_theta (rope_type "default"), or the
// hub's `legacy_key`.
absl::StatusOr<double> ReadTheta(const HfConfig& config,
                                 const std::string& layer_type,
                                 const char* legacy_key, double fallback) {
  if (config.Has("rope_scaling")) {
    return Refuse(config, "rope_scaling is not supported for modernbert");
  }
  if (!config.Has("rope_parameters")) {
    return config.GetDouble(legacy_key, fallback);
  }
  auto all = config.GetObject("rope_parameters");
  if (!all.ok()) return all.status();
  if (!all->Has(layer_type)) return config.GetDouble(legacy_key, fallback);
  auto rope = all->GetObject(layer_type);
  if (!rope.ok()) return rope.status();
  return ReadDefaultRopeTheta(*rope, fallback);
}

absl::StatusOr<EncoderSpec> ReadModernBertSpec(const HfConfig& config) {
  EncoderSpec spec;
  spec.model_type = "modernbert";
  spec.class_prefix = "ModernBert";
  spec.key_prefixes = {"", "model."};
  spec.unserved_key_prefixes = {"head.", "decoder."};
  spec.max_position_embeddings = 8192;
  absl::Status status = ReadEncoderBasics(config, spec);
  if (!status.ok()) return status;
  auto eps = config.GetDouble("norm_eps", 1e-5);
  auto act = config.GetString("hidden_activation", "gelu");
  auto attention_bias = config.GetBool("attention_bias", false);
  auto mlp_bias = config.GetBool("mlp_bias", false);
  auto local = config.GetSize("local_attention", 128);
  auto sliding = ReadSlidingLayers(config, spec.num_hidden_layers);
  auto global_theta =
      ReadTheta(config, "full_attention", "global_rope_theta", 160000.0);
  auto local_theta =
      ReadTheta(config, "sliding_attention", "local_rope_theta", 10000.0);
  for (const absl::Status& s :
       {eps.status(), act.status(), attention_bias.status(), mlp_bias.status(),
        local.status(), sliding.status(), global_theta.status(),
        local_theta.status()}) {
    if (!s.ok()) return s;
  }
  auto activation = ParseActivation(*act);
  if (!activation.ok()) return Refuse(config, activation.status().message());
  if (*local < 2) return Refuse(config, "local_attention is below 2");

  spec.layer_kind = EncoderLayerKind::kGated;
  spec.positions = EncoderPositions::kRotary;
  spec.layer_norm_eps = *eps;
  spec.activation = *activation;
  spec.attention_bias = *attention_bias;
  spec.mlp_bias = *mlp_bias;
  EncoderNames& names = spec.names;
  names.word_embeddings = "embeddings.tok_embeddings";
  names.position_embeddings = names.token_type_embeddings = "";
  names.embeddings_norm = "embeddings.norm";
  names.layers = "layers";
  names.final_norm = "final_norm";
  names.gated.qkv = "attn.Wqkv";
  names.gated.attention_out = "attn.Wo";
  names.gated.attention_norm = "attn_norm";
  names.gated.mlp_norm = "mlp_norm";
  names.gated.mlp_fused = "mlp.Wi";
  names.gated.mlp_out = "mlp.Wo";
  spec.norm_first = true;
  spec.first_layer_attention_norm = false;
  spec.ropes = {{*global_theta}, {*local_theta}};
  for (bool is_sliding : *sliding) {
    spec.layer_attention.push_back(is_sliding
                                       ? EncoderLayerAttention{*local / 2, 1}
                                       : EncoderLayerAttention{0, 0});
  }
  return spec;
}

const EncoderRegistration kRegistration("modernbert", &ReadModernBertSpec);

}  // namespace
}  // namespace castserve::models
