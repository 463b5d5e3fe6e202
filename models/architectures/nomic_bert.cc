// NomicBERT (NomicBertModel, model_type "nomic_bert"; nomic-embed-text):
// word and token type embeddings with a LayerNorm (no position table),
// post-norm gated layers — self-attention with rotary q and k, residual,
// LayerNorm; SwiGLU down(silu(gate(x)) * up(x)), residual, LayerNorm — no
// biases. Every column of a head rotates (rotary_emb_fraction 1).
//
// Two layouts of the same weights, as transformers 5 reads them:
//   transformers 5 saves  layers.N.self_attn.{q,k,v,o}_proj,
//                         layers.N.mlp.{gate,up,down}_proj,
//                         layers.N.post_{attention,mlp}_layernorm,
//                         embeddings.LayerNorm
//   the hub's checkpoints encoder.layers.N.attn.Wqkv (q, k, v rows),
//                         attn.out_proj, mlp.fc12 (gate), mlp.fc11 (up),
//                         mlp.fc2, norm1, norm2, emb_ln
// and two spellings of the config: transformers 5's (hidden_size, ...,
// rope_parameters.rope_theta, hidden_act) or the hub's GPT-2-style one
// (n_embd, n_layer, n_head, n_inner, n_positions, rotary_emb_base,
// activation_function, layer_norm_epsilon). What the hub's config can
// switch on that this file does not compute (pre-norm, biases, partial,
// interleaved or scaled rotary, a non-gated MLP) is refused, naming the key.
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/encoders/encoder_model.h"

namespace castserve::models {
namespace {

absl::Status Refuse(const HfConfig& config, absl::string_view key,
                    absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(config.label(), ": ", key, " ", why));
}

// A size under transformers' `key` or the hub's `hub_key`; both present
// must agree.
absl::Status ReadSize(const HfConfig& config, const char* key,
                      const char* hub_key, int64_t& value) {
  auto ours = config.GetSize(key, value);
  if (!ours.ok()) return ours.status();
  value = *ours;
  if (hub_key == nullptr || !config.Has(hub_key)) return absl::OkStatus();
  auto hub = config.GetSize(hub_key);
  if (!hub.ok()) return hub.status();
  if (config.Has(key) && *hub != *ours) {
    return Refuse(config, hub_key,
                  absl::StrCat(*hub, " disagrees with ", key, " ", *ours));
  }
  value = *hub;
  return absl::OkStatus();
}

// The hub config's switches, each refused unless at the value transformers
// 5 computes (absent is that value).
absl::Status RefuseUnsupported(const HfConfig& config) {
  for (const char* key :
       {"prenorm", "qkv_proj_bias", "mlp_fc1_bias", "mlp_fc2_bias",
        "rotary_emb_interleaved", "causal", "use_rms_norm"}) {
    auto set = config.GetBool(key, false);
    if (!set.ok()) return set.status();
    if (*set) return Refuse(config, key, "is true: not supported");
  }
  for (const char* key : {"rotary_emb_scale_base", "rotary_scaling_factor"}) {
    if (config.Has(key)) return Refuse(config, key, "is set: not supported");
  }
  auto fraction = config.GetDouble("rotary_emb_fraction", 1.0);
  if (!fraction.ok()) return fraction.status();
  if (*fraction != 1.0) {
    return Refuse(config, "rotary_emb_fraction",
                  absl::StrCat(*fraction, " is not supported (only 1)"));
  }
  return absl::OkStatus();
}

// silu from hidden_act or the hub's activation_function "swiglu"
// ("geglu": gelu); other hub activations are not gated MLPs this reads.
absl::StatusOr<Activation> ReadActivation(const HfConfig& config) {
  if (config.Has("activation_function")) {
    auto hub = config.GetString("activation_function");
    if (!hub.ok()) return hub.status();
    if (*hub == "swiglu") return Activation::kSilu;
    if (*hub == "geglu") return Activation::kGelu;
    return Refuse(
        config, "activation_function",
        absl::StrCat("'", *hub, "' is not supported (swiglu, geglu)"));
  }
  auto act = config.GetString("hidden_act", "silu");
  if (!act.ok()) return act.status();
  auto activation = ParseActivation(*act);
  if (!activation.ok()) {
    return Refuse(config, "hidden_act", activation.status().message());
  }
  return *activation;
}

absl::StatusOr<double> ReadTheta(const HfConfig& config) {
  if (config.Has("rotary_emb_base")) return config.GetDouble("rotary_emb_base");
  if (!config.Has("rope_parameters")) return 1000.0;
  auto rope = config.GetObject("rope_parameters");
  if (!rope.ok()) return rope.status();
  return ReadDefaultRopeTheta(*rope, 1000.0);
}

EncoderNames TransformersNames() {
  EncoderNames names;  // embeddings.{word,token_type}_embeddings, LayerNorm.
  names.position_embeddings = "";
  names.layers = "layers";
  names.gated.q = "self_attn.q_proj";
  names.gated.k = "self_attn.k_proj";
  names.gated.v = "self_attn.v_proj";
  names.gated.attention_out = "self_attn.o_proj";
  names.gated.attention_norm = "post_attention_layernorm";
  names.gated.mlp_norm = "post_mlp_layernorm";
  names.gated.mlp_gate = "mlp.gate_proj";
  names.gated.mlp_up = "mlp.up_proj";
  names.gated.mlp_out = "mlp.down_proj";
  return names;
}

EncoderNames HubNames() {
  EncoderNames names;
  names.position_embeddings = "";
  names.embeddings_norm = "emb_ln";
  names.layers = "encoder.layers";
  names.gated.qkv = "attn.Wqkv";
  names.gated.attention_out = "attn.out_proj";
  names.gated.attention_norm = "norm1";
  names.gated.mlp_norm = "norm2";
  names.gated.mlp_gate = "mlp.fc12";
  names.gated.mlp_up = "mlp.fc11";
  names.gated.mlp_out = "mlp.fc2";
  return names;
}

absl::StatusOr<EncoderSpec> ReadNomicBertSpec(const HfConfig& config) {
  EncoderSpec spec;
  spec.model_type = "nomic_bert";
  spec.class_prefix = "NomicBert";
  spec.key_prefixes = {"", "nomic_bert."};
  spec.vocab_size = 30528;
  spec.hidden_size = 768;
  spec.num_hidden_layers = spec.num_attention_heads = 12;
  spec.intermediate_size = 3072;
  spec.max_position_embeddings = 2048;
  struct Size {
    const char* key;
    const char* hub_key;
    int64_t* value;
  };
  absl::Status status = RefuseUnsupported(config);
  for (const Size& size : std::vector<Size>{
           {"vocab_size", nullptr, &spec.vocab_size},
           {"hidden_size", "n_embd", &spec.hidden_size},
           {"num_hidden_layers", "n_layer", &spec.num_hidden_layers},
           {"num_attention_heads", "n_head", &spec.num_attention_heads},
           {"intermediate_size", "n_inner", &spec.intermediate_size},
           {"max_position_embeddings", "n_positions",
            &spec.max_position_embeddings},
           {"type_vocab_size", nullptr, &spec.type_vocab_size}}) {
    if (status.ok()) {
      status = ReadSize(config, size.key, size.hub_key, *size.value);
    }
  }
  if (!status.ok()) return status;
  if (spec.hidden_size % spec.num_attention_heads != 0) {
    return Refuse(config, "hidden_size", "is not a multiple of the head count");
  }
  auto eps = config.Has("layer_norm_epsilon")
                 ? config.GetDouble("layer_norm_epsilon")
                 : config.GetDouble("layer_norm_eps", 1e-12);
  auto activation = ReadActivation(config);
  auto theta = ReadTheta(config);
  if (!eps.ok()) return eps.status();
  if (!activation.ok()) return activation.status();
  if (!theta.ok()) return theta.status();
  spec.layer_norm_eps = *eps;
  spec.activation = *activation;
  spec.layer_kind = EncoderLayerKind::kGated;
  spec.positions = EncoderPositions::kRotary;
  spec.attention_bias = spec.mlp_bias = false;
  spec.names = TransformersNames();
  spec.other_names = {HubNames()};
  spec.ropes = {{*theta}};
  spec.layer_attention.assign(spec.num_hidden_layers, {0, 0});
  return spec;
}

const EncoderRegistration kRegistration("nomic_bert", &ReadNomicBertSpec);

}  // namespace
}  // namespace castserve::models
