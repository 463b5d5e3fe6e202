#include "models/encoders/encoder_spec.h"

#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace castserve::models {
namespace {

absl::Status Refuse(const HfConfig& config, absl::string_view key,
                    absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(config.label(), ": ", key, " ", why));
}

// The bounds of num_labels (kConfigSizeLimits' row).
absl::StatusOr<int64_t> LabelLimit() {
  for (const ConfigSizeLimit& limit : kConfigSizeLimits) {
    if (absl::string_view(limit.key) == "num_labels") return limit.max;
  }
  return absl::InternalError("num_labels has no row in kConfigSizeLimits");
}

}  // namespace

int64_t EncoderSpec::max_sequence_length() const {
  return positions == EncoderPositions::kAfterPadding
             ? max_position_embeddings - padding_idx - 1
             : max_position_embeddings;
}

absl::Status ReadEncoderBasics(const HfConfig& config, EncoderSpec& spec) {
  struct Field {
    const char* key;
    int64_t* value;
    bool required;
  };
  for (const Field& field : std::vector<Field>{
           {"vocab_size", &spec.vocab_size, true},
           {"hidden_size", &spec.hidden_size, true},
           {"num_hidden_layers", &spec.num_hidden_layers, true},
           {"num_attention_heads", &spec.num_attention_heads, true},
           {"intermediate_size", &spec.intermediate_size, true},
           {"max_position_embeddings", &spec.max_position_embeddings, false},
           {"type_vocab_size", &spec.type_vocab_size, false}}) {
    absl::StatusOr<int64_t> value =
        field.required ? config.GetSize(field.key)
                       : config.GetSize(field.key, *field.value);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  absl::StatusOr<double> eps = config.GetDouble("layer_norm_eps", 1e-12);
  absl::StatusOr<std::string> act = config.GetString("hidden_act", "gelu");
  absl::StatusOr<std::string> positions =
      config.GetString("position_embedding_type", "absolute");
  if (!eps.ok()) return eps.status();
  if (!act.ok()) return act.status();
  if (!positions.ok()) return positions.status();
  if (*positions != "absolute") {
    return Refuse(
        config, "position_embedding_type",
        absl::StrCat("'", *positions, "' is not supported (only 'absolute')"));
  }
  for (const char* key : {"is_decoder", "add_cross_attention"}) {
    absl::StatusOr<bool> set = config.GetBool(key, false);
    if (!set.ok()) return set.status();
    if (*set) {
      return Refuse(config, key, "is true: castserve serves encoders only");
    }
  }
  absl::StatusOr<Activation> activation = ParseActivation(*act);
  if (!activation.ok()) {
    return Refuse(config, "hidden_act", activation.status().message());
  }
  if (spec.hidden_size % spec.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": hidden_size ", spec.hidden_size,
                     " is not a multiple of num_attention_heads ",
                     spec.num_attention_heads));
  }
  spec.layer_norm_eps = *eps;
  spec.activation = *activation;
  return absl::OkStatus();
}

absl::Status ValidateEncoderSpec(const EncoderSpec& spec) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.model_type, " encoder spec: ", why));
  };
  const bool rotary = spec.positions == EncoderPositions::kRotary;
  const bool gated = spec.layer_kind == EncoderLayerKind::kGated;
  if (rotary != gated) {
    return bad("rotary positions go with the gated layer and only with it");
  }
  if (!gated) return absl::OkStatus();
  const GatedLayerNames& names = spec.names.gated;
  const bool fused_qkv = !names.qkv.empty();
  const bool split_qkv =
      !names.q.empty() && !names.k.empty() && !names.v.empty();
  const bool fused_mlp = !names.mlp_fused.empty();
  const bool split_mlp = !names.mlp_gate.empty() && !names.mlp_up.empty();
  if (fused_qkv == split_qkv || fused_mlp == split_mlp ||
      names.attention_out.empty() || names.attention_norm.empty() ||
      names.mlp_norm.empty() || names.mlp_out.empty()) {
    return bad(
        "a gated layer names qkv or q, k and v; attention_out; both "
        "norms; mlp_fused or mlp_gate and mlp_up; mlp_out");
  }
  if (static_cast<int64_t>(spec.layer_attention.size()) !=
      spec.num_hidden_layers) {
    return bad(absl::StrCat("layer_attention lists ",
                            spec.layer_attention.size(), " layers, not ",
                            spec.num_hidden_layers));
  }
  const int64_t head_dim = spec.hidden_size / spec.num_attention_heads;
  if (head_dim % 2 != 0) {
    return bad(absl::StrCat("rotary heads of ", head_dim, " columns (odd)"));
  }
  for (const EncoderRope& rope : spec.ropes) {
    if (!(rope.theta > 0)) {
      return bad(absl::StrCat("a rotary theta of ", rope.theta));
    }
  }
  for (const EncoderLayerAttention& layer : spec.layer_attention) {
    if (layer.rope < 0 || layer.rope >= static_cast<int>(spec.ropes.size()) ||
        layer.window < 0) {
      return bad(absl::StrCat("a layer names rotary table ", layer.rope, " of ",
                              spec.ropes.size(), " (window ", layer.window,
                              ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ReadDefaultRopeTheta(const HfConfig& rope,
                                            double fallback) {
  absl::StatusOr<std::string> type = rope.GetString("rope_type", "default");
  if (!type.ok()) return type.status();
  if (*type != "default") {
    return Refuse(
        rope, "rope_type",
        absl::StrCat("'", *type, "' is not supported (only 'default')"));
  }
  return rope.GetDouble("rope_theta", fallback);
}

absl::StatusOr<bool> IsSequenceClassifier(const HfConfig& config,
                                          absl::string_view class_prefix) {
  if (!config.Has("architectures")) return false;
  absl::StatusOr<std::vector<std::string>> names =
      config.GetStringList("architectures");
  if (!names.ok()) return names.status();
  const std::string classifier =
      absl::StrCat(class_prefix, "ForSequenceClassification");
  for (const std::string& name : *names) {
    if (name == classifier) return true;
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> ReadClassifierLabels(
    const HfConfig& config) {
  absl::StatusOr<std::string> problem =
      config.GetString("problem_type", "single_label_classification");
  if (!problem.ok()) return problem.status();
  if (*problem != "single_label_classification" &&
      *problem != "multi_label_classification" && *problem != "regression") {
    return Refuse(config, "problem_type",
                  absl::StrCat("'", *problem,
                               "' is not one of transformers' "
                               "(the scores are the logits)"));
  }
  absl::StatusOr<int64_t> limit = LabelLimit();
  if (!limit.ok()) return limit.status();
  std::vector<std::string> labels;
  if (!config.Has("id2label")) {
    absl::StatusOr<int64_t> count = config.GetSize("num_labels", 2);
    if (!count.ok()) return count.status();
    for (int64_t i = 0; i < *count; ++i) {
      labels.push_back(absl::StrCat("LABEL_", i));
    }
    return labels;
  }
  absl::StatusOr<HfConfig> id2label = config.GetObject("id2label");
  if (!id2label.ok()) return id2label.status();
  const std::vector<std::string> ids = id2label->Keys();
  if (ids.empty() || static_cast<int64_t>(ids.size()) > *limit) {
    return Refuse(config, "id2label",
                  absl::StrCat("holds ", ids.size(), " labels, outside [1, ",
                               *limit, "]"));
  }
  std::map<int64_t, std::string> by_id;
  for (const std::string& id : ids) {
    int64_t index = -1;
    if (!absl::SimpleAtoi(id, &index) || index < 0 ||
        index >= static_cast<int64_t>(ids.size())) {
      return Refuse(config, absl::StrCat("id2label[\"", id, "\"]"),
                    absl::StrCat("is not a label id in [0, ", ids.size(), ")"));
    }
    absl::StatusOr<std::string> name = id2label->GetString(id);
    if (!name.ok()) return name.status();
    if (!by_id.emplace(index, *name).second) {
      return Refuse(config, absl::StrCat("id2label[\"", id, "\"]"),
                    "repeats a label id");
    }
  }
  for (auto& [index, name] : by_id) labels.push_back(std::move(name));
  if (config.Has("num_labels")) {
    absl::StatusOr<int64_t> count = config.GetSize("num_labels");
    if (!count.ok()) return count.status();
    if (*count != static_cast<int64_t>(labels.size())) {
      return Refuse(config, "num_labels",
                    absl::StrCat("is ", *count, " but id2label holds ",
                                 labels.size(), " labels"));
    }
  }
  return labels;
}

}  // namespace castserve::models
