#include "models/encoders/sentence_pooling.h"

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace castserve::models {
namespace {

// One row per mode, in the classic layout's concatenation order: the
// classic config key that switches it on, and its name in
// sentence-transformers 6's pooling_mode (also castserve's messages).
struct ModeKey {
  PoolingMode mode;
  const char* key;
  const char* name;
};
constexpr ModeKey kModeKeys[] = {
    {PoolingMode::kCls, "pooling_mode_cls_token", "cls"},
    {PoolingMode::kMax, "pooling_mode_max_tokens", "max"},
    {PoolingMode::kMean, "pooling_mode_mean_tokens", "mean"},
    {PoolingMode::kMeanSqrtLen, "pooling_mode_mean_sqrt_len_tokens",
     "mean_sqrt_len_tokens"},
    {PoolingMode::kWeightedMean, "pooling_mode_weightedmean_tokens",
     "weightedmean"},
    {PoolingMode::kLastToken, "pooling_mode_lasttoken", "lasttoken"},
};

// sentence-transformers 6's "pooling_mode": one name or a list, the modes
// concatenated in the listed order.
absl::StatusOr<std::vector<PoolingMode>> ReadModeNames(const HfConfig& config) {
  std::vector<std::string> names;
  absl::StatusOr<std::string> one = config.GetString("pooling_mode");
  if (one.ok()) {
    names.push_back(*one);
  } else {
    absl::StatusOr<std::vector<std::string>> list =
        config.GetStringList("pooling_mode");
    if (!list.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          config.label(), ": pooling_mode is neither a mode name nor a list"));
    }
    names = *std::move(list);
  }
  std::vector<PoolingMode> modes;
  for (const std::string& name : names) {
    const ModeKey* found = nullptr;
    for (const ModeKey& row : kModeKeys) {
      if (name == row.name) found = &row;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.label(), ": pooling_mode '", name,
                       "' is not one of cls, max, mean, mean_sqrt_len_tokens, "
                       "weightedmean, lasttoken"));
    }
    modes.push_back(found->mode);
  }
  return modes;
}

// Sums over the sequence of `hidden` * `weights` [batch, seq, 1], divided
// by the weights' sums (clamped at 1e-9), or by their square roots.
at::Tensor WeightedSum(const at::Tensor& hidden, const at::Tensor& weights) {
  return (hidden * weights).sum(1);
}

at::Tensor Count(const at::Tensor& weights) {
  return weights.sum(1).clamp_min(1e-9);
}

// The embedding at each sequence's last token (index 0 when it has none),
// times the mask there.
at::Tensor LastToken(const at::Tensor& hidden, const at::Tensor& mask) {
  const int64_t seq = hidden.size(1);
  at::Tensor positions = at::arange(seq, mask.options().dtype(at::kLong));
  // The largest position whose mask is set; -1 without one.
  at::Tensor last =
      at::where(mask.to(at::kBool), positions, at::full_like(positions, -1))
          .amax(1)
          .clamp_min(0);
  at::Tensor index =
      last.view({-1, 1, 1}).expand({hidden.size(0), 1, hidden.size(2)});
  at::Tensor masked = hidden * mask.unsqueeze(-1).to(hidden.scalar_type());
  return masked.gather(1, index).squeeze(1);
}

at::Tensor PoolOne(PoolingMode mode, const at::Tensor& hidden,
                   const at::Tensor& mask, const at::Tensor& weights) {
  switch (mode) {
    case PoolingMode::kCls: {
      // The first real token (sentence-transformers 6: the first position
      // whose mask is set, 0 without one), whichever side the padding is.
      at::Tensor first = mask.ne(0).to(at::kInt).argmax(1);
      at::Tensor index =
          first.view({-1, 1, 1}).expand({hidden.size(0), 1, hidden.size(2)});
      return hidden.gather(1, index).squeeze(1);
    }
    case PoolingMode::kMax:
      return hidden.masked_fill(weights == 0, -1e9).amax(1);
    case PoolingMode::kMean:
      return WeightedSum(hidden, weights) / Count(weights);
    case PoolingMode::kMeanSqrtLen:
      return WeightedSum(hidden, weights) / Count(weights).sqrt();
    case PoolingMode::kWeightedMean: {
      at::Tensor by_position =
          weights *
          at::arange(1, hidden.size(1) + 1, weights.options()).view({1, -1, 1});
      return WeightedSum(hidden, by_position) / Count(by_position);
    }
    case PoolingMode::kLastToken:
      return LastToken(hidden, mask);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown pooling mode");
}

}  // namespace

absl::string_view PoolingModeName(PoolingMode mode) {
  for (const ModeKey& row : kModeKeys) {
    if (row.mode == mode) return row.name;
  }
  return "?";
}

absl::StatusOr<PoolingConfig> PoolingConfig::FromHf(const HfConfig& config) {
  PoolingConfig pooling;
  // sentence-transformers 6 renamed the dimension and folded the switches
  // into pooling_mode (which wins over switches, as there).
  absl::StatusOr<int64_t> dimension =
      config.Has("embedding_dimension")
          ? config.GetSize("embedding_dimension")
          : config.GetSize("word_embedding_dimension");
  if (!dimension.ok()) {
    return absl::InvalidArgumentError(dimension.status().message());
  }
  pooling.word_embedding_dimension = *dimension;
  if (config.Has("pooling_mode")) {
    absl::StatusOr<std::vector<PoolingMode>> modes = ReadModeNames(config);
    if (!modes.ok()) return modes.status();
    pooling.modes = *std::move(modes);
  }
  for (const ModeKey& row : kModeKeys) {
    if (config.Has("pooling_mode")) break;
    absl::StatusOr<bool> on = config.GetBool(row.key, false);
    if (!on.ok()) return on.status();
    if (*on) pooling.modes.push_back(row.mode);
  }
  absl::StatusOr<bool> include_prompt = config.GetBool("include_prompt", true);
  if (!include_prompt.ok()) return include_prompt.status();
  pooling.include_prompt = *include_prompt;
  if (pooling.modes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(),
        ": switches on no pooling mode (pooling_mode_cls_token, "
        "pooling_mode_max_tokens, pooling_mode_mean_tokens, "
        "pooling_mode_mean_sqrt_len_tokens, "
        "pooling_mode_weightedmean_tokens, pooling_mode_lasttoken)"));
  }
  return pooling;
}

at::Tensor Pool(const PoolingConfig& config, const at::Tensor& hidden,
                const at::Tensor& mask) {
  TORCH_INTERNAL_ASSERT(
      hidden.dim() == 3 && hidden.size(2) == config.word_embedding_dimension,
      "pooling ", hidden.sizes(), " token embeddings with a ",
      config.word_embedding_dimension, "-wide config");
  TORCH_INTERNAL_ASSERT(mask.dim() == 2 && mask.size(0) == hidden.size(0) &&
                            mask.size(1) == hidden.size(1),
                        "mask ", mask.sizes(), " for embeddings ",
                        hidden.sizes());
  const at::Tensor weights = mask.unsqueeze(-1).to(hidden.scalar_type());
  std::vector<at::Tensor> pooled;
  pooled.reserve(config.modes.size());
  for (PoolingMode mode : config.modes) {
    pooled.push_back(PoolOne(mode, hidden, mask, weights));
  }
  return pooled.size() == 1 ? pooled.front() : at::cat(pooled, 1);
}

at::Tensor L2NormalizeRows(const at::Tensor& rows) {
  return rows / rows.norm(2, 1, /*keepdim=*/true).clamp_min(1e-12);
}

}  // namespace castserve::models
