// Token selection for generation: greedy, or a draw after the logits
// processors transformers defines (repetition penalty, temperature, top-k,
// top-p), from a generator seeded per sequence.
#ifndef CASTSERVE_MODELS_GENERATION_SAMPLING_H_
#define CASTSERVE_MODELS_GENERATION_SAMPLING_H_

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace castserve::models {

struct SamplingParams {
  // 0: greedy (argmax, ties to the lowest id); > 0 and finite: the logits
  // are divided by it and a token is drawn.
  double temperature = 0;
  // 0: off; else only the k highest logits (ties at the k-th kept) remain.
  int64_t top_k = 0;
  // In (0, 1]: the smallest set of most probable tokens whose probability
  // reaches top_p remains (always at least one). 1: off.
  double top_p = 1;
  // > 0 and finite; 1: off. Logits of ids already in the prompt or the
  // generated tokens are divided by it when positive, multiplied when not.
  // Applies to greedy generation too (as transformers does).
  double repetition_penalty = 1;
  // The sequence's generator seed: its draws depend only on it and on the
  // logits.
  uint64_t seed = 0;
};

// InvalidArgument naming the parameter for temperature < 0 or not finite,
// top_k < 0, top_p outside (0, 1], repetition_penalty <= 0 or not finite.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// The processors, on logits f32 [vocab] in host memory; each returns a new
// tensor. Masked tokens get -infinity.
at::Tensor ApplyRepetitionPenalty(const at::Tensor& logits,
                                  const std::vector<int64_t>& ids,
                                  double penalty);
at::Tensor ApplyTopK(const at::Tensor& logits, int64_t top_k);
at::Tensor ApplyTopP(const at::Tensor& logits, double top_p);
// All of them in transformers' order: repetition penalty, temperature,
// top-k, top-p (params valid; temperature > 0).
at::Tensor ProcessLogits(const at::Tensor& logits,
                         const std::vector<int64_t>& ids,
                         const SamplingParams& params);

// Chooses the tokens of one sequence. Used by one thread at a time.
class Sampler {
 public:
  // InvalidArgument as ValidateSamplingParams.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);
  // For `params` already checked (CheckGenerationRequest ran
  // ValidateSamplingParams where the request entered): asserted, not checked
  // again.
  static Sampler ForChecked(const SamplingParams& params);

  // The next token after `ids` (prompt and generated tokens) given the last
  // position's logits f32 [vocab] in host memory (ids within it).
  int64_t Next(const at::Tensor& logits, const std::vector<int64_t>& ids);

 private:
  Sampler(const SamplingParams& params, at::Generator generator)
      : params_(params), generator_(std::move(generator)) {}

  SamplingParams params_;
  at::Generator generator_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_SAMPLING_H_
