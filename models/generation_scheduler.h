// GenerationScheduler: iteration-level (continuous) batching of generation
// for one decoder model (llama, mistral, qwen2). Sequences join the running
// batch and leave it between decode steps; every step runs the new tokens of
// all running sequences (a joining sequence's prompt, one token of each
// other) through the model together, so that every weight is read, decoded
// and cast once per step instead of once per sequence.
//
// KV-cache memory comes in blocks of `block_tokens` tokens from a pool of
// at most `pool_bytes` per model: a sequence takes the blocks of its prompt
// when it joins and one more block each time it crosses a block boundary,
// and gives all of them back when it ends, fails or is cancelled. When the
// pool cannot take a new sequence, it waits (at most `max_waiting` of them,
// each until its deadline) instead of failing the running ones.
//
// Threads: the scheduler owns one step thread (joined by Stop()); forwards,
// sampling and every callback run on it. Submit, Stop and stats are
// thread-safe.
#ifndef CASTSERVE_MODELS_GENERATION_SCHEDULER_H_
#define CASTSERVE_MODELS_GENERATION_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/generation.h"
#include "models/model.h"

namespace castserve::models {

struct SchedulerOptions {
  // The KV-cache pool's size in bytes (> 0), rounded down to whole blocks;
  // InvalidArgument when it cannot hold one sequence of one block.
  int64_t pool_bytes = 0;
  // Tokens per block (> 0).
  int64_t block_tokens = 16;
  // Sequences in the running batch at most (> 0).
  int64_t max_running = 8;
  // Sequences waiting for room (pool or batch) at most (>= 0); one more is
  // refused with RESOURCE_EXHAUSTED.
  int64_t max_waiting = 64;
};

// The pool and the batch, now.
struct SchedulerStats {
  int64_t pool_capacity_bytes = 0;  // Whole blocks of pool_bytes.
  int64_t kv_bytes_in_use = 0;      // Blocks held by sequences.
  int64_t kv_bytes_peak = 0;        // Highest kv_bytes_in_use since Create.
  int64_t running = 0;
  int64_t waiting = 0;
};

// One sequence to generate. Callbacks run on the step thread, must not
// block, and must not call back into the scheduler.
struct SequenceRequest {
  // Token ids, non-empty, within the vocabulary.
  std::vector<int64_t> prompt;
  // As for Generate (generation.h); validated the same way.
  GenerationOptions options;
  // The sequence fails with DEADLINE_EXCEEDED after this, waiting or
  // running (its blocks are freed).
  absl::Time deadline = absl::InfiniteFuture();
  // Polled before every step; true ends the sequence with CANCELLED (its
  // blocks are freed). May be null.
  std::function<bool()> is_cancelled;
  // Each new token as soon as it is chosen, in order. Returning false ends
  // the sequence after this token with Stop::kStoppedByCaller (a stop
  // string matched, the caller has what it needs). May be null.
  std::function<bool(int64_t token)> on_token;
  // Exactly once: the result (every new token, the stop reason, the KV bytes
  // the sequence held at most), or the error: InvalidArgument as Generate's
  // checks, RESOURCE_EXHAUSTED when the waiting line is full or the prompt
  // alone needs more than the whole pool, DEADLINE_EXCEEDED, CANCELLED,
  // UNAVAILABLE after Stop(), the model's errors. Inline when Submit refuses
  // the sequence at once, else on the step thread.
  std::function<void(absl::StatusOr<GenerationResult>)> on_done;
};

class GenerationScheduler {
 public:
  // InvalidArgument when `model` has no incremental decoder or `options`
  // are out of range. The pool's memory is allocated on the model's device
  // as blocks are first needed (tracked like the model's other
  // allocations). `model` must outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<GenerationScheduler>> Create(
      const Model& model, const SchedulerOptions& options);
  // Stop().
  ~GenerationScheduler();

  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Validates `request` and queues it; request.on_done runs exactly once.
  void Submit(SequenceRequest request);

  // Ends every waiting and running sequence with UNAVAILABLE, refuses new
  // ones, and joins the step thread. Idempotent.
  void Stop();

  SchedulerStats stats() const;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_SCHEDULER_H_
