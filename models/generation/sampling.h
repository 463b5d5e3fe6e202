// Token selection for generation: greedy, or a draw after the logits
// processors transformers defines (repetition penalty, temperature, top-k,
// top-p) with OpenAI's presence and frequency penalties between the first two
// (vLLM's order), from a generator seeded per sequence; and, when asked, the
// log-probabilities of the chosen token and of the most probable ones.
#ifndef CASTSERVE_MODELS_GENERATION_SAMPLING_H_
#define CASTSERVE_MODELS_GENERATION_SAMPLING_H_

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
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
  // In [-kMaxPenalty, kMaxPenalty]; 0: off. OpenAI's penalties, counted as
  // OpenAI and vLLM count them: over the tokens this sequence generated so
  // far, not its prompt. logit[id] -= frequency_penalty * count(id), then
  // -= presence_penalty * (count(id) > 0). After the repetition penalty,
  // before temperature (vLLM's order); greedy generation too.
  double presence_penalty = 0;
  double frequency_penalty = 0;
  // true: every chosen token comes with its log-probability and those of the
  // top_logprobs most probable tokens (TokenLogprobs), all taken from the raw
  // model distribution: log_softmax of the logits before any processor
  // (vLLM's default, "raw_logprobs"): what the model thinks, whatever the
  // penalties and temperature then did to the draw.
  bool logprobs = false;
  // 0..kMaxTopLogprobs; > 0 only with logprobs.
  int64_t top_logprobs = 0;
  // The sequence's generator seed: its draws depend only on it and on the
  // logits.
  uint64_t seed = 0;
};

inline constexpr double kMaxPenalty = 2;
inline constexpr int64_t kMaxTopLogprobs = 20;

// One chosen token's log-probabilities (SamplingParams::logprobs).
struct TokenLogprobs {
  float logprob = 0;  // The chosen token's.
  // The top_logprobs most probable ids, most probable first, and theirs
  // (the chosen one among them when it is one of them).
  std::vector<int64_t> top_ids;
  std::vector<float> top_logprobs;
};

struct SampledToken {
  int64_t id = 0;
  // Present when the params ask for logprobs.
  std::optional<TokenLogprobs> logprobs;
};

// InvalidArgument naming the parameter for temperature < 0 or not finite,
// top_k < 0, top_p outside (0, 1], repetition_penalty <= 0 or not finite,
// presence_penalty or frequency_penalty outside [-2, 2] or not finite,
// top_logprobs outside [0, 20] or > 0 without logprobs.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// The processors, on logits f32 [vocab] in host memory; each returns a new
// tensor. Masked tokens get -infinity.
at::Tensor ApplyRepetitionPenalty(const at::Tensor& logits,
                                  const std::vector<int64_t>& ids,
                                  double penalty);
// `generated`: the sequence's new tokens so far (a repeated id counts each
// time).
at::Tensor ApplyPresenceFrequencyPenalty(const at::Tensor& logits,
                                         const std::vector<int64_t>& generated,
                                         double presence_penalty,
                                         double frequency_penalty);
at::Tensor ApplyTopK(const at::Tensor& logits, int64_t top_k);
at::Tensor ApplyTopP(const at::Tensor& logits, double top_p);
// The penalties: repetition (over `ids`, prompt and new tokens) then
// frequency and presence (over `generated`).
at::Tensor ApplyPenalties(const at::Tensor& logits,
                          const std::vector<int64_t>& ids,
                          const std::vector<int64_t>& generated,
                          const SamplingParams& params);
// All of them in order: the penalties, temperature, top-k, top-p (params
// valid; temperature > 0).
at::Tensor ProcessLogits(const at::Tensor& logits,
                         const std::vector<int64_t>& ids,
                         const std::vector<int64_t>& generated,
                         const SamplingParams& params);
// The log-probabilities of `chosen` and of the `top` most probable ids
// under the distribution of raw `logits` f32 [vocab].
TokenLogprobs LogprobsOf(const at::Tensor& logits, int64_t chosen, int64_t top);

// Chooses the tokens of one sequence. Used by one thread at a time.
class Sampler {
 public:
  // For `params` already checked: CheckGenerationRequest (generation.h) ran
  // ValidateSamplingParams where the request entered. Asserted (debug
  // builds), not checked again.
  static Sampler ForChecked(const SamplingParams& params);

  // The next token after `ids` (prompt and generated tokens) given the last
  // position's logits f32 [vocab] in host memory (ids within it), with its
  // log-probabilities when the params ask for them. Each call's token counts
  // as generated for the presence and frequency penalties of the next calls:
  // one Sampler per sequence, called once per new token.
  SampledToken Next(const at::Tensor& logits, const std::vector<int64_t>& ids);

 private:
  Sampler(const SamplingParams& params, at::Generator generator)
      : params_(params), generator_(std::move(generator)) {}

  int64_t Choose(const at::Tensor& logits, const std::vector<int64_t>& ids);

  SamplingParams params_;
  at::Generator generator_;
  std::vector<int64_t> generated_;  // What Next returned so far.
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_SAMPLING_H_
