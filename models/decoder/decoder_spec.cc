#include "models/decoder/decoder_spec.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace castserve::models {
namespace {

// The status of the first failed read, or OK.
absl::Status FirstError(std::initializer_list<absl::Status> statuses) {
  for (const absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// The rope type named by `scaling` ("rope_type", or legacy "type"),
// "default" when it names none.
absl::StatusOr<std::string> RopeTypeName(const HfConfig& scaling) {
  if (scaling.Has("rope_type")) return scaling.GetString("rope_type");
  return scaling.GetString("type", "default");
}

absl::Status ReadLlama3(const HfConfig& scaling, RopeOptions& rope) {
  auto low = scaling.GetDouble("low_freq_factor");
  auto high = scaling.GetDouble("high_freq_factor");
  auto original = scaling.GetSize("original_max_position_embeddings");
  absl::Status status =
      FirstError({low.status(), high.status(), original.status()});
  if (!status.ok()) return status;
  rope.low_freq_factor = *low;
  rope.high_freq_factor = *high;
  rope.original_max_position_embeddings = *original;
  return absl::OkStatus();
}

// LongRoPE (transformers' _compute_longrope_parameters): the factors, one
// per rotated pair; the original table size (the rope object's, else the
// config's); the attention factor, by default sqrt(1 + ln(f) / ln(orig))
// for f = max_position_embeddings / original (or "factor") above 1.
absl::Status ReadLongRope(const HfConfig& scaling, const HfConfig& root,
                          DecoderRope& rope) {
  auto short_factor = scaling.GetDoubleList("short_factor");
  auto long_factor = scaling.GetDoubleList("long_factor");
  absl::Status status =
      FirstError({short_factor.status(), long_factor.status()});
  if (!status.ok()) return status;
  const size_t pairs = static_cast<size_t>(rope.options.head_dim / 2);
  if (short_factor->size() != pairs || long_factor->size() != pairs) {
    return absl::InvalidArgumentError(absl::StrCat(
        scaling.label(), ": short_factor and long_factor must have ", pairs,
        " entries (rotary dimension / 2), got ", short_factor->size(), " and ",
        long_factor->size()));
  }
  for (const std::vector<double>* factors : {&*short_factor, &*long_factor}) {
    for (double f : *factors) {
      if (!(f > 0) || !std::isfinite(f)) {
        return absl::InvalidArgumentError(absl::StrCat(
            scaling.label(), ": LongRoPE factors must be positive, got ", f));
      }
    }
  }
  const HfConfig& original_source =
      scaling.Has("original_max_position_embeddings") ? scaling : root;
  auto original = original_source.GetSize("original_max_position_embeddings");
  auto max_positions = root.GetSize("max_position_embeddings");
  status = FirstError({original.status(), max_positions.status()});
  if (!status.ok()) return status;
  auto factor = scaling.GetDouble(
      "factor", static_cast<double>(*max_positions) / *original);
  auto attention_factor = scaling.GetDouble("attention_factor", 0.0);
  status = FirstError({factor.status(), attention_factor.status()});
  if (!status.ok()) return status;
  rope.options.original_max_position_embeddings = *original;
  rope.short_factor = *std::move(short_factor);
  rope.long_factor = *std::move(long_factor);
  rope.attention_factor =
      *attention_factor > 0 ? *attention_factor
      : *factor <= 1.0
          ? 1.0
          : std::sqrt(1 + std::log(*factor) /
                              std::log(static_cast<double>(*original)));
  return absl::OkStatus();
}

// Each key/value head serves a whole group of query heads.
absl::Status CheckHeadsDivide(int64_t num_attention_heads,
                              int64_t num_key_value_heads) {
  if (num_key_value_heads <= 0 ||
      num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", num_attention_heads,
                     ") must be a multiple of num_key_value_heads (",
                     num_key_value_heads, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecoderSpec::Validate() const {
  if (absl::Status status =
          CheckHeadsDivide(num_attention_heads, num_key_value_heads);
      !status.ok()) {
    return status;
  }
  if (ropes.empty() ||
      layers.size() != static_cast<size_t>(num_hidden_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_type, ": ", layers.size(), " layer specs for ", num_hidden_layers,
        " layers and ", ropes.size(), " rotary tables"));
  }
  for (const DecoderLayerAttention& layer : layers) {
    if (layer.rope < 0 || layer.rope >= static_cast<int>(ropes.size()) ||
        layer.sliding_window < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(model_type, ": a layer names rotary table ", layer.rope,
                       " or window ", layer.sliding_window));
    }
  }
  for (const DecoderRope& rope : ropes) {
    absl::Status valid = rope.options.Validate();
    if (!valid.ok()) return valid;
    if (rope.options.head_dim > head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("rotary dimension ", rope.options.head_dim,
                       " exceeds head_dim ", head_dim));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadDecoderSizes(const HfConfig& config, DecoderSpec& spec) {
  struct Field {
    const char* key;
    int64_t* value;
  };
  for (const Field& field :
       {Field{"vocab_size", &spec.vocab_size},
        Field{"hidden_size", &spec.hidden_size},
        Field{"intermediate_size", &spec.intermediate_size},
        Field{"num_hidden_layers", &spec.num_hidden_layers},
        Field{"num_attention_heads", &spec.num_attention_heads},
        Field{"max_position_embeddings", &spec.max_position_embeddings}}) {
    absl::StatusOr<int64_t> value = config.GetSize(field.key);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  auto kv_heads =
      config.GetSize("num_key_value_heads", spec.num_attention_heads);
  if (!kv_heads.ok()) return kv_heads.status();
  spec.num_key_value_heads = *kv_heads;
  if (absl::Status status =
          CheckHeadsDivide(spec.num_attention_heads, spec.num_key_value_heads);
      !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": ", status.message()));
  }
  // Without head_dim, transformers splits hidden_size between the heads.
  if (!config.Has("head_dim") &&
      spec.hidden_size % spec.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": hidden_size (", spec.hidden_size,
                     ") must be a multiple of num_attention_heads (",
                     spec.num_attention_heads, ") when head_dim is not given"));
  }
  auto head_dim =
      config.GetSize("head_dim", spec.hidden_size / spec.num_attention_heads);
  if (!head_dim.ok()) return head_dim.status();
  spec.head_dim = *head_dim;
  return absl::OkStatus();
}

absl::Status ReadDecoderBasics(const HfConfig& config, DecoderSpec& spec,
                               absl::string_view activation_key,
                               absl::string_view activation_default,
                               bool tie_default) {
  absl::Status status = ReadDecoderSizes(config, spec);
  if (!status.ok()) return status;
  auto eps = config.GetDouble("rms_norm_eps", 1e-6);
  auto tie = config.GetBool("tie_word_embeddings", tie_default);
  auto act = config.GetString(activation_key, activation_default);
  status = FirstError({eps.status(), tie.status(), act.status()});
  if (!status.ok()) return status;
  absl::StatusOr<Activation> activation = ParseActivation(*act);
  if (!activation.ok()) return activation.status();
  spec.norm_eps = *eps;
  spec.tie_word_embeddings = *tie;
  spec.mlp_activation = *activation;
  return absl::OkStatus();
}

void SetUniformLayers(DecoderSpec& spec, int64_t sliding_window) {
  spec.layers.assign(static_cast<size_t>(spec.num_hidden_layers),
                     DecoderLayerAttention{sliding_window, 0});
}

absl::StatusOr<DecoderRope> ReadDecoderRope(const HfConfig& rope_source,
                                            const HfConfig& root,
                                            int64_t head_dim,
                                            double theta_default) {
  DecoderRope rope;
  auto theta = rope_source.GetDouble("rope_theta", theta_default);
  auto root_partial = root.GetDouble("partial_rotary_factor", 1.0);
  absl::Status status = FirstError({theta.status(), root_partial.status()});
  if (!status.ok()) return status;
  auto partial = rope_source.GetDouble("partial_rotary_factor", *root_partial);
  if (!partial.ok()) return partial.status();
  if (!(*partial > 0 && *partial <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        rope_source.label(), ": partial_rotary_factor must be in (0, 1], got ",
        *partial));
  }
  rope.options.theta = *theta;
  rope.options.head_dim =
      static_cast<int64_t>(static_cast<double>(head_dim) * *partial);
  auto type = RopeTypeName(rope_source);
  if (!type.ok()) return type.status();
  if (*type == "longrope") {
    status = ReadLongRope(rope_source, root, rope);
    if (!status.ok()) return status;
    return rope;
  }
  status = ParseRopeType(*type, &rope.options.type);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(status.message(), ", longrope"));
  }
  if (rope.options.type == RopeType::kDefault) return rope;
  auto factor = rope_source.GetDouble("factor");
  if (!factor.ok()) return factor.status();
  rope.options.factor = *factor;
  if (rope.options.type == RopeType::kLlama3) {
    status = ReadLlama3(rope_source, rope.options);
    if (!status.ok()) return status;
  }
  return rope;
}

absl::StatusOr<DecoderRope> ReadFlatDecoderRope(const HfConfig& config,
                                                int64_t head_dim) {
  // transformers >= 5 nests theta and scaling in "rope_parameters"; older
  // configs keep rope_theta at the top and the scaling in "rope_scaling".
  absl::StatusOr<HfConfig> nested = config.GetObject("rope_parameters");
  if (nested.ok()) return ReadDecoderRope(*nested, config, head_dim, 10000.0);
  if (!absl::IsNotFound(nested.status())) return nested.status();
  auto theta = config.GetDouble("rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  absl::StatusOr<HfConfig> scaling = config.GetObject("rope_scaling");
  if (absl::IsNotFound(scaling.status())) {
    return ReadDecoderRope(config, config, head_dim, *theta);
  }
  if (!scaling.ok()) return scaling.status();
  return ReadDecoderRope(*scaling, config, head_dim, *theta);
}

absl::StatusOr<std::vector<bool>> ReadSlidingLayers(
    const HfConfig& config, int64_t num_layers,
    const std::vector<bool>& fallback) {
  if (!config.Has("layer_types")) return fallback;
  auto types = config.GetStringList("layer_types");
  if (!types.ok()) return types.status();
  if (static_cast<int64_t>(types->size()) != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": layer_types has ", types->size(),
                     " entries for ", num_layers, " layers"));
  }
  std::vector<bool> sliding;
  for (const std::string& type : *types) {
    if (type != "full_attention" && type != "sliding_attention") {
      return absl::InvalidArgumentError(
          absl::StrCat(config.label(), ": layer_types holds '", type,
                       "'; supported: full_attention, sliding_attention"));
    }
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

absl::StatusOr<double> ReadOptionalPositive(const HfConfig& config,
                                            absl::string_view key) {
  auto value = config.GetDouble(key, 0.0);
  if (!value.ok()) return value.status();
  if (*value < 0 || !std::isfinite(*value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": ", key, " must be positive, got ", *value));
  }
  return value;
}

}  // namespace castserve::models
