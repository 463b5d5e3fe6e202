// Greedy generation for decoder-only language models (llama, mistral,
// qwen2): the prompt runs once (prefill) filling a per-sequence KV cache,
// then each step runs the one token it chose through every layer. Equals
// transformers' generate(do_sample=False) token for token (the committed
// references in models/testdata/*/generation_reference.json).
//
// With SamplingParams (sampling.h) a token is drawn instead, from a
// generator seeded per sequence. Generate runs one sequence per call, its
// cache preallocated per sequence; GenerationScheduler
// (generation_scheduler.h) batches many sequences over a KV block pool.
#ifndef CASTSERVE_MODELS_GENERATION_GENERATION_H_
#define CASTSERVE_MODELS_GENERATION_GENERATION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/cancellation.h"
#include "models/generation/kv_cache.h"
#include "models/generation/sampling.h"
#include "models/model.h"

namespace castserve::models {

// The most tokens one call may generate (a bound on a request's ask, well
// above any position table castserve serves).
inline constexpr int64_t kMaxNewTokens = 1 << 20;

struct GenerationOptions {
  // 1..kMaxNewTokens, and prompt + max_new_tokens within the position table.
  int64_t max_new_tokens = 0;
  // Generation stops after producing one of these (it is returned). Empty:
  // only max_new_tokens stops it.
  std::vector<int64_t> eos_token_ids;
  // More ids that stop generation the same way (returned, Stop::kStopToken
  // unless the id is also an EOS).
  std::vector<int64_t> stop_token_ids;
  // Default: greedy.
  SamplingParams sampling;
};

struct GenerationResult {
  // kStoppedByCaller: the scheduler's on_token returned false
  // (generation_scheduler.h); Generate never stops so.
  enum class Stop { kEos, kStopToken, kMaxNewTokens, kStoppedByCaller };
  std::vector<int64_t> tokens;  // The new tokens, the EOS/stop id included.
  // With sampling.logprobs: one per token, in order; else empty.
  std::vector<TokenLogprobs> logprobs;
  Stop stop = Stop::kMaxNewTokens;
  // What the sequence's KV cache held at most (KvCache::bytes(), or the
  // scheduler's blocks).
  int64_t kv_cache_bytes = 0;
};

// The EOS ids of a checkpoint folder: generation_config.json's eos_token_id
// (an integer or a list), else config.json's; empty when neither has one.
// Errors as HfConfig::Load's; InvalidArgument for an eos_token_id of
// another type.
absl::StatusOr<std::vector<int64_t>> ReadEosTokenIds(const std::string& folder);

// One sequence being decoded: the model's KV cache for it and the tokens
// fed so far. Used by one thread at a time; distinct sessions of one model
// run concurrently (the model is immutable).
class DecodeSession {
 public:
  // InvalidArgument when `model` has no incremental decoder or `capacity`
  // (tokens) is not in 1..its position table; RESOURCE_EXHAUSTED when the
  // cache cannot be allocated. `model` must outlive the session.
  static absl::StatusOr<std::unique_ptr<DecodeSession>> Create(
      const Model& model, int64_t capacity);

  // Runs `tokens` (at least one; ids within the vocabulary; at most
  // capacity() - length() of them, else InvalidArgument) through the model
  // after the tokens fed before, under at::InferenceMode with a fresh
  // ForwardContext (compute copies are released when it returns), and
  // returns their logits f32 [tokens.size(), vocab] in host memory. Errors
  // as Model::Run's (CANCELLED once `cancellation` is set). After an error
  // other than InvalidArgument the session must not be fed again.
  absl::StatusOr<at::Tensor> Feed(const std::vector<int64_t>& tokens,
                                  const Cancellation* cancellation = nullptr);

  // Feed, returning only the last token's logits f32 [vocab]: what choosing
  // the next token needs, without copying a whole prompt's rows to the host.
  absl::StatusOr<at::Tensor> FeedLast(
      const std::vector<int64_t>& tokens,
      const Cancellation* cancellation = nullptr);

  int64_t length() const { return cache_->length(); }
  int64_t capacity() const { return cache_->capacity(); }
  int64_t kv_cache_bytes() const { return cache_->bytes(); }

 private:
  absl::StatusOr<at::Tensor> Run(const std::vector<int64_t>& tokens,
                                 const Cancellation* cancellation,
                                 bool last_only);

  DecodeSession(const Model& model, const IncrementalDecoder& decoder,
                std::unique_ptr<KvCache> cache)
      : model_(model), decoder_(decoder), cache_(std::move(cache)) {}

  const Model& model_;
  const IncrementalDecoder& decoder_;
  const std::unique_ptr<KvCache> cache_;
};

// The model's incremental decoder; InvalidArgument "architecture X cannot
// generate" for a model without one.
absl::StatusOr<const IncrementalDecoder*> DecoderOf(const Model& model);

// How `token` stops a sequence by its id: kEos for one of
// options.eos_token_ids, else kStopToken for one of options.stop_token_ids;
// nullopt for any other token.
std::optional<GenerationResult::Stop> StopByIdOf(
    const GenerationOptions& options, int64_t token);

// A generation request checked by CheckGenerationRequest, the one check of
// a generation request: only that function makes one. Generate and
// GenerationScheduler take one and trust it; they assert (not check) that
// it was checked against their model's decoder. Copyable.
class CheckedGeneration {
 public:
  // Non-empty, ids in [0, vocab_size()).
  const std::vector<int64_t>& prompt() const { return prompt_; }
  // max_new_tokens in 1..kMaxNewTokens and within the positions the prompt
  // leaves; stop ids in [0, vocab_size()); valid sampling parameters.
  const GenerationOptions& options() const { return options_; }
  // What it was checked against.
  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_positions() const { return max_positions_; }

 private:
  friend absl::StatusOr<CheckedGeneration> CheckGenerationRequest(
      int64_t vocab_size, int64_t max_positions, std::vector<int64_t> prompt,
      GenerationOptions options);
  CheckedGeneration(int64_t vocab_size, int64_t max_positions,
                    std::vector<int64_t> prompt, GenerationOptions options)
      : vocab_size_(vocab_size),
        max_positions_(max_positions),
        prompt_(std::move(prompt)),
        options_(std::move(options)) {}

  int64_t vocab_size_;
  int64_t max_positions_;
  std::vector<int64_t> prompt_;
  GenerationOptions options_;
};

// The one check of a generation request, made where it enters: by the
// server's generation edge (server/servables/generation/generation_request.h)
// and by direct callers of Generate and GenerationScheduler::Submit (tests,
// benchmarks). InvalidArgument for an empty prompt, max_new_tokens outside
// 1..kMaxNewTokens, a prompt longer than `max_positions` (the decoder's
// position table: its context) or prompt + max_new_tokens beyond it, prompt
// or stop ids outside [0, vocab_size), bad sampling parameters
// (ValidateSamplingParams).
absl::StatusOr<CheckedGeneration> CheckGenerationRequest(
    int64_t vocab_size, int64_t max_positions, std::vector<int64_t> prompt,
    GenerationOptions options);
// The same against `model`'s decoder; InvalidArgument for a model without
// incremental decoding.
absl::StatusOr<CheckedGeneration> CheckGenerationRequest(
    const Model& model, std::vector<int64_t> prompt, GenerationOptions options);

// Generation: the checked prompt then up to max_new_tokens tokens chosen by
// a Sampler of the options' sampling (greedy by default: argmax, ties to the
// lowest id), stopping after an EOS or stop id. `request` must have been
// checked against `model` (asserted: InternalError otherwise, as for a model
// without incremental decoding). CANCELLED once `cancellation` is set
// (checked between steps and at every module boundary); other errors as
// Model::Run's. Thread-safe.
absl::StatusOr<GenerationResult> Generate(
    const Model& model, const CheckedGeneration& request,
    const Cancellation* cancellation = nullptr);

// Whether `request` was checked against `decoder`'s vocabulary and
// positions: what Generate and the scheduler assert.
bool CheckedFor(const CheckedGeneration& request,
                const IncrementalDecoder& decoder);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_GENERATION_H_
