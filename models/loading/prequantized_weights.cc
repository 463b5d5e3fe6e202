#include "models/loading/prequantized_weights.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"

namespace castserve::models {
namespace {

using casting::DType;
using casting::ElementType;
using casting::Scaling;
using casting::StorageFormat;
using casting::TensorEntry;

// The last name component of every tensor that quantization methods store
// beside a weight: weight scales, activation scales, zero points.
constexpr absl::string_view kScaleSuffixes[] = {
    "weight_scale_inv",
    "weight_scale",
    "input_scale",
    "activation_scale",
    "output_scale",
    "weight_zero_point",
    "input_zero_point",
    "weight_global_scale",
    "input_global_scale",
    "k_scale",
    "v_scale",
};

// What a quantization_config means for castserve.
struct Layout {
  std::string method;        // quant_method, for messages.
  std::string scale_suffix;  // "weight_scale_inv" or "weight_scale".
  StorageFormat format;
  bool dynamic_activations = false;
};

absl::Status Refuse(const HfConfig& config, absl::string_view field,
                    absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(config.label(), ": ", field, " ", why));
}

// Refuses any key of `config` outside `known`: a field castserve does not
// know may change what the weights mean.
absl::Status CheckKnownKeys(const HfConfig& config,
                            absl::Span<const absl::string_view> known) {
  for (const std::string& key : config.Keys()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Refuse(config, key,
                    "is a quantization setting castserve does not know; it "
                    "refuses rather than serve weights it may misread");
    }
  }
  return absl::OkStatus();
}

// `key`, a lower-cased string (default `default_value`), must be one of
// `accepted`.
absl::StatusOr<std::string> GetChoice(
    const HfConfig& config, absl::string_view key,
    absl::string_view default_value,
    absl::Span<const absl::string_view> accepted) {
  absl::StatusOr<std::string> value = config.GetString(key, default_value);
  if (!value.ok()) return value.status();
  const std::string lower = absl::AsciiStrToLower(*value);
  if (std::find(accepted.begin(), accepted.end(), lower) != accepted.end()) {
    return lower;
  }
  return Refuse(config, key,
                absl::StrCat("is \"", *value, "\"; castserve reads only ",
                             absl::StrJoin(accepted, ", ")));
}

absl::Status CheckStringListIfPresent(const HfConfig& config,
                                      absl::string_view key) {
  if (!config.Has(key)) return absl::OkStatus();
  return config.GetStringList(key).status();
}

// [b0, b1], each in [1, kMaxScaleBlockSide], as a per-block fp8 format.
absl::StatusOr<StorageFormat> BlockFormat(const HfConfig& config,
                                          absl::string_view key) {
  absl::StatusOr<std::vector<int64_t>> block = config.GetIntList(key);
  if (!block.ok()) return block.status();
  const auto in_range = [](int64_t side) {
    return side >= 1 && side <= casting::kMaxScaleBlockSide;
  };
  if (block->size() != 2 || !in_range((*block)[0]) || !in_range((*block)[1])) {
    return Refuse(config, key,
                  absl::StrCat("must be two block sides in [1, ",
                               casting::kMaxScaleBlockSide, "]"));
  }
  return StorageFormat::PerBlock(ElementType::kF8E4M3FN,
                                 static_cast<int32_t>((*block)[0]),
                                 static_cast<int32_t>((*block)[1]));
}

absl::StatusOr<Layout> ReadFp8(const HfConfig& q) {
  static constexpr absl::string_view kKnown[] = {
      "quant_method",      "activation_scheme",
      "weight_block_size", "fmt",
      "dequantize",        "modules_to_not_convert",
      "ignored_layers",    "modules_to_convert",
      "scale_fmt",         "expert_dtype"};
  if (absl::Status status = CheckKnownKeys(q, kKnown); !status.ok()) {
    return status;
  }
  Layout layout{
      "fp8", "weight_scale_inv", {ElementType::kF8E4M3FN, Scaling::kPerTensor}};
  absl::StatusOr<std::string> activations =
      GetChoice(q, "activation_scheme", "dynamic", {"dynamic"});
  if (!activations.ok()) return activations.status();
  layout.dynamic_activations = true;
  for (auto [key, only] :
       {std::pair<absl::string_view, absl::string_view>{"fmt", "e4m3"},
        {"scale_fmt", "float"},
        {"expert_dtype", "fp8"}}) {
    if (absl::StatusOr<std::string> value = GetChoice(q, key, only, {only});
        !value.ok()) {
      return value.status();
    }
  }
  for (absl::string_view key :
       {"modules_to_not_convert", "ignored_layers", "modules_to_convert"}) {
    if (absl::Status status = CheckStringListIfPresent(q, key); !status.ok()) {
      return status;
    }
  }
  if (q.Has("weight_block_size")) {
    absl::StatusOr<StorageFormat> format = BlockFormat(q, "weight_block_size");
    if (!format.ok()) return format.status();
    layout.format = *format;
  }
  return layout;
}

absl::StatusOr<Layout> ReadFbgemmFp8(const HfConfig& q) {
  static constexpr absl::string_view kKnown[] = {
      "quant_method", "activation_scale_ub", "modules_to_not_convert"};
  if (absl::Status status = CheckKnownKeys(q, kKnown); !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CheckStringListIfPresent(q, "modules_to_not_convert");
      !status.ok()) {
    return status;
  }
  return Layout{"fbgemm_fp8",
                "weight_scale",
                {ElementType::kF8E4M3FN, Scaling::kPerRow},
                /*dynamic_activations=*/true};
}

// One config group's `weights`: fp8, symmetric, static, tensor / channel /
// block.
absl::StatusOr<StorageFormat> ReadCompressedWeights(const HfConfig& weights) {
  static constexpr absl::string_view kKnown[] = {
      "num_bits",   "type",     "symmetric",
      "group_size", "strategy", "block_structure",
      "dynamic",    "actorder", "scale_dtype",
      "zp_dtype",   "observer", "observer_kwargs"};
  if (absl::Status status = CheckKnownKeys(weights, kKnown); !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> bits = weights.GetInt("num_bits");
  if (!bits.ok()) return bits.status();
  if (*bits != 8) {
    return Refuse(weights, "num_bits",
                  absl::StrCat("is ", *bits, "; castserve reads fp8 (8)"));
  }
  if (absl::StatusOr<std::string> type =
          GetChoice(weights, "type", "", {"float"});
      !type.ok()) {
    return type.status();
  }
  absl::StatusOr<bool> symmetric = weights.GetBool("symmetric", true);
  if (!symmetric.ok()) return symmetric.status();
  if (!*symmetric) {
    return Refuse(weights, "symmetric",
                  "is false: castserve applies no zero points");
  }
  absl::StatusOr<bool> dynamic = weights.GetBool("dynamic", false);
  if (!dynamic.ok()) return dynamic.status();
  if (*dynamic) {
    return Refuse(weights, "dynamic",
                  "is true: weights without stored scales are not fp8 "
                  "storage castserve can read");
  }
  if (weights.Has("group_size")) {
    return Refuse(weights, "group_size", "is set: castserve reads no groups");
  }
  absl::StatusOr<std::string> strategy =
      GetChoice(weights, "strategy", "tensor", {"tensor", "channel", "block"});
  if (!strategy.ok()) return strategy.status();
  if (*strategy == "block") return BlockFormat(weights, "block_structure");
  return StorageFormat{ElementType::kF8E4M3FN, *strategy == "channel"
                                                   ? Scaling::kPerRow
                                                   : Scaling::kPerTensor};
}

// One config group: its weights' format; dynamic input activations noted.
absl::StatusOr<StorageFormat> ReadCompressedGroup(const HfConfig& group,
                                                  bool* dynamic_activations) {
  static constexpr absl::string_view kKnown[] = {
      "targets", "weights", "input_activations", "output_activations",
      "format"};
  if (absl::Status status = CheckKnownKeys(group, kKnown); !status.ok()) {
    return status;
  }
  if (group.Has("format")) {
    if (absl::StatusOr<std::string> format = GetChoice(
            group, "format", "", {"float-quantized", "naive-quantized"});
        !format.ok()) {
      return format.status();
    }
  }
  if (group.Has("output_activations")) {
    return Refuse(group, "output_activations",
                  "is set: castserve quantizes no outputs");
  }
  if (group.Has("input_activations")) {
    absl::StatusOr<HfConfig> inputs = group.GetObject("input_activations");
    if (!inputs.ok()) return inputs.status();
    absl::StatusOr<bool> dynamic = inputs->GetBool("dynamic", false);
    if (!dynamic.ok()) return dynamic.status();
    if (!*dynamic) {
      return Refuse(*inputs, "dynamic",
                    "is false: static activation scales would have to be "
                    "applied, and castserve computes in the compute dtype");
    }
    *dynamic_activations = true;
  }
  absl::StatusOr<HfConfig> weights = group.GetObject("weights");
  if (!weights.ok()) return weights.status();
  return ReadCompressedWeights(*weights);
}

absl::StatusOr<Layout> ReadCompressedTensors(const HfConfig& q) {
  static constexpr absl::string_view kKnown[] = {"config_groups",
                                                 "quant_method",
                                                 "kv_cache_scheme",
                                                 "format",
                                                 "quantization_status",
                                                 "global_compression_ratio",
                                                 "ignore",
                                                 "moe_sparsity_config",
                                                 "sparsity_config",
                                                 "transform_config",
                                                 "version",
                                                 "provider",
                                                 "dequantize",
                                                 "run_compressed",
                                                 "use_optimized_inference"};
  if (absl::Status status = CheckKnownKeys(q, kKnown); !status.ok()) {
    return status;
  }
  for (absl::string_view key : {"kv_cache_scheme", "sparsity_config",
                                "moe_sparsity_config", "transform_config"}) {
    if (q.Has(key) && !q.IsEmpty(key)) {
      return Refuse(q, key, "is set: castserve applies no such scheme");
    }
  }
  for (auto [key, accepted] :
       {std::pair<absl::string_view, std::vector<absl::string_view>>{
            "format", {"float-quantized", "naive-quantized"}},
        {"quantization_status", {"compressed"}}}) {
    if (absl::StatusOr<std::string> value = GetChoice(
            q, key, key == "format" ? "dense" : "compressed", accepted);
        !value.ok()) {
      return value.status();
    }
  }
  if (absl::Status status = CheckStringListIfPresent(q, "ignore");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<HfConfig> groups = q.GetObject("config_groups");
  if (!groups.ok()) return groups.status();
  Layout layout{"compressed-tensors", "weight_scale", {}};
  std::optional<std::string> first_group;
  for (const std::string& name : groups->Keys()) {
    absl::StatusOr<HfConfig> group = groups->GetObject(name);
    if (!group.ok()) return group.status();
    absl::StatusOr<StorageFormat> format =
        ReadCompressedGroup(*group, &layout.dynamic_activations);
    if (!format.ok()) return format.status();
    if (first_group.has_value() && *format != layout.format) {
      return Refuse(
          *groups, name,
          absl::StrCat("stores weights as ", format->ToString(), " and ",
                       *first_group, " as ", layout.format.ToString(),
                       "; castserve reads one weight layout"));
    }
    first_group = name;
    layout.format = *format;
  }
  if (!first_group.has_value()) {
    return Refuse(q, "config_groups", "is empty");
  }
  return layout;
}

// The layout `config`'s quantization_config describes; nullopt without one.
absl::StatusOr<std::optional<Layout>> ReadLayout(const HfConfig& config) {
  if (!config.Has("quantization_config")) return std::nullopt;
  absl::StatusOr<HfConfig> q = config.GetObject("quantization_config");
  if (!q.ok()) return q.status();
  absl::StatusOr<std::string> method = q->GetString("quant_method");
  if (!method.ok()) return method.status();
  absl::StatusOr<Layout> layout;
  if (*method == "fp8") {
    layout = ReadFp8(*q);
  } else if (*method == "compressed-tensors") {
    layout = ReadCompressedTensors(*q);
  } else if (*method == "fbgemm_fp8") {
    layout = ReadFbgemmFp8(*q);
  } else {
    return Refuse(*q, "quant_method",
                  absl::StrCat("is \"", *method,
                               "\"; castserve reads fp8, compressed-tensors "
                               "(float-quantized) and fbgemm_fp8 weights"));
  }
  if (!layout.ok()) return layout.status();
  return *std::move(layout);
}

// "weight_scale_inv" for "model.x.weight_scale_inv"; "" for other names.
absl::string_view ScaleSuffixOf(absl::string_view name) {
  const size_t dot = name.rfind('.');
  const absl::string_view last =
      dot == absl::string_view::npos ? name : name.substr(dot + 1);
  for (absl::string_view suffix : kScaleSuffixes) {
    if (last == suffix) return suffix;
  }
  return "";
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// InvalidArgument unless `scales` has a shape the layout writes for a
// weight of `weight`'s shape under `format`.
absl::Status CheckScaleShape(const TensorEntry& scales,
                             const TensorEntry& weight, StorageFormat format) {
  const std::vector<int64_t>& shape = scales.shape;
  std::vector<std::vector<int64_t>> accepted;
  if (format.scaling == Scaling::kPerTensor) {
    accepted = {{}, {1}};
  } else if (weight.shape.size() == 2) {
    const int64_t rows = weight.shape[0];
    if (format.scaling == Scaling::kPerRow) {
      accepted = {{rows, 1}, {rows}};
    } else {
      accepted = {*format.ScaleShape(weight.shape)};  // Rank 2: cannot fail.
    }
  }
  if (std::find(accepted.begin(), accepted.end(), shape) != accepted.end()) {
    return absl::OkStatus();
  }
  if (accepted.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", weight.name, "' has shape ", ShapeText(weight.shape), "; ",
        format.ToString(), " scales need a 2-D weight"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "scale tensor '", scales.name, "' has shape ", ShapeText(shape),
      "; weight '", weight.name, "' ", ShapeText(weight.shape), " under ",
      format.ToString(), " needs ", ShapeText(accepted.front())));
}

bool IsFp8(DType dtype) {
  return dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2;
}

std::string NoteFor(const Layout& layout, size_t count) {
  std::string note =
      absl::StrCat(layout.method, ": ", count, " fp8 weights kept as stored (",
                   layout.format.ToString(), "), upcast per layer");
  if (layout.dynamic_activations) {
    absl::StrAppend(&note,
                    "; the config's dynamic activation quantization is not "
                    "applied: layers compute in the compute dtype");
  }
  return note;
}

}  // namespace

absl::StatusOr<PrequantizedWeights> PrequantizedWeights::Read(
    const HfConfig& config, const casting::Checkpoint& checkpoint) {
  absl::StatusOr<std::optional<Layout>> layout = ReadLayout(config);
  if (!layout.ok()) return layout.status();
  PrequantizedWeights weights;
  for (const TensorEntry& entry : checkpoint.tensors()) {
    const absl::string_view suffix = ScaleSuffixOf(entry.name);
    if (suffix.empty()) continue;
    if (!layout->has_value() || suffix != (*layout)->scale_suffix) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor '", entry.name,
          "' is a quantization scale no weight claims (",
          layout->has_value()
              ? absl::StrCat("quant_method ", (*layout)->method, " stores ",
                             (*layout)->scale_suffix, " tensors")
              : std::string("config.json has no quantization_config"),
          "); castserve refuses rather than ignore it"));
    }
    const std::string weight_key = absl::StrCat(
        entry.name.substr(0, entry.name.size() - suffix.size()), "weight");
    const TensorEntry* weight = checkpoint.Find(weight_key);
    if (weight == nullptr || weight->dtype != DType::kF8E4M3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor '", entry.name, "' scales no fp8 weight: '",
          weight_key, "' ",
          weight == nullptr
              ? std::string("is missing")
              : absl::StrCat("has dtype ", casting::DTypeName(weight->dtype),
                             ", not F8_E4M3")));
    }
    if (absl::Status status =
            CheckScaleShape(entry, *weight, (*layout)->format);
        !status.ok()) {
      return status;
    }
    weights.weights_[weight_key] = {(*layout)->format, entry.name};
  }
  if (!layout->has_value()) return weights;
  for (const TensorEntry& entry : checkpoint.tensors()) {
    if (IsFp8(entry.dtype) && weights.Find(entry.name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fp8 weight '", entry.name, "' has no scale tensor (quant_method ",
          (*layout)->method, " stores it as '",
          absl::StripSuffix(entry.name, "weight"), (*layout)->scale_suffix,
          "')"));
    }
  }
  if (!weights.empty()) weights.note_ = NoteFor(**layout, weights.size());
  return weights;
}

const PrequantizedWeight* PrequantizedWeights::Find(
    absl::string_view key) const {
  auto it = weights_.find(key);
  return it == weights_.end() ? nullptr : &it->second;
}

}  // namespace castserve::models
