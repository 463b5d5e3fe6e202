#include "models/generation/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace castserve::models {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature is ", params.temperature,
                     "; it must be finite and >= 0 (0: greedy)"));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k is ", params.top_k, "; it must be >= 0 (0: off)"));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_p is ", params.top_p, "; it must be in (0, 1] (1: off)"));
  }
  if (!std::isfinite(params.repetition_penalty) ||
      params.repetition_penalty <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty is ", params.repetition_penalty,
                     "; it must be finite and > 0 (1: off)"));
  }
  return absl::OkStatus();
}

at::Tensor ApplyRepetitionPenalty(const at::Tensor& logits,
                                  const std::vector<int64_t>& ids,
                                  double penalty) {
  at::Tensor result = logits.clone();
  if (penalty == 1 || ids.empty()) return result;
  at::Tensor index = at::tensor(ids, at::kLong);
  at::Tensor seen = result.index_select(0, index);
  seen = at::where(seen > 0, seen / penalty, seen * penalty);
  // Repeated ids write the same value.
  return result.index_put_({index}, seen);
}

at::Tensor ApplyTopK(const at::Tensor& logits, int64_t top_k) {
  const int64_t k = std::min(top_k, logits.size(0));
  if (k <= 0) return logits.clone();
  at::Tensor kth = std::get<0>(logits.topk(k)).index({k - 1});
  return logits.masked_fill(logits < kth, kMasked);
}

at::Tensor ApplyTopP(const at::Tensor& logits, double top_p) {
  if (top_p >= 1) return logits.clone();
  auto [sorted, order] = logits.sort(/*stable=*/true, /*dim=*/0,
                                     /*descending=*/true);
  at::Tensor probs = sorted.softmax(0);
  // A token stays while the mass of the tokens before it is below top_p:
  // the first always stays.
  at::Tensor before = probs.cumsum(0) - probs;
  at::Tensor drop_sorted = before >= top_p;
  at::Tensor drop = at::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
  return logits.masked_fill(drop, kMasked);
}

at::Tensor ProcessLogits(const at::Tensor& logits,
                         const std::vector<int64_t>& ids,
                         const SamplingParams& params) {
  // Each step only when it is on: every Apply* returns a new tensor, and the
  // division already makes one.
  at::Tensor result =
      params.repetition_penalty == 1
          ? logits / params.temperature
          : ApplyRepetitionPenalty(logits, ids, params.repetition_penalty) /
                params.temperature;
  if (params.top_k > 0) result = ApplyTopK(result, params.top_k);
  if (params.top_p < 1) result = ApplyTopP(result, params.top_p);
  return result;
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  absl::Status valid = ValidateSamplingParams(params);
  if (!valid.ok()) return valid;
  return ForChecked(params);
}

Sampler Sampler::ForChecked(const SamplingParams& params) {
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(ValidateSamplingParams(params).ok());
  return Sampler(params, at::make_generator<at::CPUGeneratorImpl>(params.seed));
}

int64_t Sampler::Next(const at::Tensor& logits,
                      const std::vector<int64_t>& ids) {
  if (params_.temperature == 0) {
    const at::Tensor& scores =
        params_.repetition_penalty == 1
            ? logits
            : ApplyRepetitionPenalty(logits, ids, params_.repetition_penalty);
    return scores.argmax().item<int64_t>();
  }
  at::Tensor probs = ProcessLogits(logits, ids, params_).softmax(0);
  return at::multinomial(probs, 1, /*replacement=*/false, generator_)
      .item<int64_t>();
}

}  // namespace castserve::models
