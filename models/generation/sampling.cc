#include "models/generation/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
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
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"presence_penalty",
                                       params.presence_penalty},
        {"frequency_penalty", params.frequency_penalty}}) {
    if (!(value >= -kMaxPenalty && value <= kMaxPenalty)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is ", value, "; it must be in [", -kMaxPenalty,
                       ", ", kMaxPenalty, "] (0: off)"));
    }
  }
  if (params.top_logprobs < 0 || params.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs is ", params.top_logprobs,
                     "; it must be in [0, ", kMaxTopLogprobs, "]"));
  }
  if (params.top_logprobs > 0 && !params.logprobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_logprobs is ", params.top_logprobs, "; it needs logprobs"));
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

at::Tensor ApplyPresenceFrequencyPenalty(const at::Tensor& logits,
                                         const std::vector<int64_t>& generated,
                                         double presence_penalty,
                                         double frequency_penalty) {
  if ((presence_penalty == 0 && frequency_penalty == 0) || generated.empty()) {
    return logits.clone();
  }
  at::Tensor counts = at::zeros_like(logits).index_add_(
      0, at::tensor(generated, at::kLong),
      at::ones({static_cast<int64_t>(generated.size())}, logits.options()));
  // vLLM's arithmetic, in its order: frequency, then presence.
  return logits - counts * frequency_penalty -
         (counts > 0).to(logits.scalar_type()) * presence_penalty;
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

at::Tensor ApplyPenalties(const at::Tensor& logits,
                          const std::vector<int64_t>& ids,
                          const std::vector<int64_t>& generated,
                          const SamplingParams& params) {
  at::Tensor result =
      ApplyRepetitionPenalty(logits, ids, params.repetition_penalty);
  if (params.presence_penalty == 0 && params.frequency_penalty == 0) {
    return result;
  }
  return ApplyPresenceFrequencyPenalty(
      result, generated, params.presence_penalty, params.frequency_penalty);
}

at::Tensor ProcessLogits(const at::Tensor& logits,
                         const std::vector<int64_t>& ids,
                         const std::vector<int64_t>& generated,
                         const SamplingParams& params) {
  at::Tensor result = ApplyPenalties(logits, ids, generated, params);
  result.div_(params.temperature);
  if (params.top_k > 0) result = ApplyTopK(result, params.top_k);
  if (params.top_p < 1) result = ApplyTopP(result, params.top_p);
  return result;
}

TokenLogprobs LogprobsOf(const at::Tensor& logits, int64_t chosen,
                         int64_t top) {
  at::Tensor logprobs = logits.to(at::kFloat).log_softmax(0);
  TokenLogprobs result;
  result.logprob = logprobs[chosen].item<float>();
  const int64_t k = std::min(top, logprobs.size(0));
  if (k <= 0) return result;
  auto [values, ids] = logprobs.topk(k);
  values = values.contiguous();
  ids = ids.contiguous();
  result.top_ids.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + k);
  result.top_logprobs.assign(values.data_ptr<float>(),
                             values.data_ptr<float>() + k);
  return result;
}

Sampler Sampler::ForChecked(const SamplingParams& params) {
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(ValidateSamplingParams(params).ok());
  return Sampler(params, at::make_generator<at::CPUGeneratorImpl>(params.seed));
}

SampledToken Sampler::Next(const at::Tensor& logits,
                           const std::vector<int64_t>& ids) {
  SampledToken token;
  token.id = Choose(logits, ids);
  generated_.push_back(token.id);
  if (params_.logprobs) {
    token.logprobs = LogprobsOf(logits, token.id, params_.top_logprobs);
  }
  return token;
}

int64_t Sampler::Choose(const at::Tensor& logits,
                        const std::vector<int64_t>& ids) {
  if (params_.temperature == 0) {
    const bool penalised = params_.repetition_penalty != 1 ||
                           params_.presence_penalty != 0 ||
                           params_.frequency_penalty != 0;
    const at::Tensor& scores =
        penalised ? ApplyPenalties(logits, ids, generated_, params_) : logits;
    return scores.argmax().item<int64_t>();
  }
  at::Tensor probs = ProcessLogits(logits, ids, generated_, params_).softmax(0);
  return at::multinomial(probs, 1, /*replacement=*/false, generator_)
      .item<int64_t>();
}

}  // namespace castserve::models
