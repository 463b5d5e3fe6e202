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
// Policy. Admission: waiting sequences join in arrival order (a preempted
// one first), between steps, while the batch has a place and the pool has
// the blocks of the sequence's tokens plus one (the first new token's); the
// first that does not fit stops admission for the step (no overtaking, so a
// long prompt is not starved by short ones). Growth: before each step every
// running sequence takes the blocks its new tokens need, oldest first; when
// the pool is empty, the newest running sequence is preempted (its blocks
// freed, its tokens kept; it waits at the front of the line and on joining
// again recomputes its cache from its prompt and the tokens it generated,
// its sampler's state kept, so its output is what it would have been up to
// the rounding of a prefill against one-token steps), so that the sequences
// running longest finish first and newcomers never fail running ones. A
// sequence that alone needs more than the whole pool fails with
// RESOURCE_EXHAUSTED. Deadlines and is_cancelled are checked for every
// sequence, waiting or running, before every step.
//
// Prefix caching (options.prefix_caching, kv_block_pool.h): after every
// step each running sequence publishes its newly filled blocks; a joining
// sequence (a preempted one too) shares the cached blocks of the longest
// prefix of its tokens in whole blocks, all but its last token at most, and
// runs only the rest through the model. Its admission needs the blocks of
// its tokens + 1 less those it shares that are already held. Cached blocks
// no sequence holds are the first evicted when a block is needed and none
// is free.
//
// Threads: the scheduler owns one step thread (joined by Stop()); forwards,
// sampling and every callback run on it. Submit, Stop and stats are
// thread-safe.
#ifndef CASTSERVE_MODELS_GENERATION_GENERATION_SCHEDULER_H_
#define CASTSERVE_MODELS_GENERATION_GENERATION_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/cancellation.h"
#include "models/generation/generation.h"
#include "models/generation/incremental_decoder.h"
#include "models/generation/kv_block_pool.h"
#include "models/model.h"
#include "platform/clock.h"
#include "platform/executor.h"

namespace castserve::models {

struct SchedulerOptions {
  // The KV-cache pool's size in bytes (> 0), rounded down to whole blocks;
  // InvalidArgument when it cannot hold one sequence of one block.
  int64_t pool_bytes = 0;
  // Tokens per block (> 0).
  int64_t block_tokens = 16;
  // Sequences in the running batch at most (> 0).
  int64_t max_running = 8;
  // Automatic prefix caching over the pool (see above).
  bool prefix_caching = true;
  // Sequences waiting for room (pool or batch) at most (>= 0); one more is
  // refused with RESOURCE_EXHAUSTED. A sequence submitted while the batch
  // has a free place does not count (it joins at the next step).
  int64_t max_waiting = 64;
  // The tracking allocator's model id (casting::ScopedModelTag) that the
  // step thread's allocations count for: the pool's blocks and each step's
  // transients (CPU tracking allocator; device ledger on CUDA). Empty: the
  // id the thread calling Create is tagged with, if any.
  std::string model_tag;
  // What sequences' deadlines are compared with, before each step (not
  // owned; outlives the scheduler).
  platform::Clock* clock = &platform::Clock::Real();
};

// The pool and the batch, now.
struct SchedulerStats {
  int64_t pool_capacity_bytes = 0;  // Whole blocks of pool_bytes.
  int64_t kv_bytes_in_use = 0;      // Blocks held by sequences.
  int64_t kv_bytes_peak = 0;        // Highest kv_bytes_in_use since Create.
  // Blocks allocated now: held, free in the pool or cached.
  int64_t kv_bytes_allocated = 0;
  // Prefix caching, since Create: of the tokens of joining sequences, those
  // whose keys and values came from cached blocks (hits) and those
  // computed (misses); 0 with prefix caching off.
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_miss_tokens = 0;
  // Now: cached blocks no sequence holds (part of the pool's bytes).
  int64_t prefix_cache_bytes = 0;
  int64_t running = 0;
  int64_t waiting = 0;
};

// One sequence to generate. Callbacks run on the step thread, must not
// block, and must not call back into the scheduler.
struct SequenceRequest {
  explicit SequenceRequest(CheckedGeneration checked)
      : generation(std::move(checked)) {}

  // The prompt and options, checked by CheckGenerationRequest
  // (generation.h) against the scheduler's model (asserted).
  CheckedGeneration generation;
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
  // With sampling.logprobs: each new token's log-probabilities, just before
  // on_token gets that token. May be null.
  std::function<void(const TokenLogprobs& logprobs)> on_logprobs;
  // Exactly once: the result (every new token, the stop reason, the KV bytes
  // the sequence held at most), or the error: RESOURCE_EXHAUSTED when the
  // waiting line is full or the prompt alone needs more than the whole pool,
  // DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE after Stop(), the model's errors.
  // Inline when Submit refuses the sequence at once, else on the step thread.
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

  // Queues `request` (its generation checked against this scheduler's model:
  // asserted, INTERNAL otherwise); request.on_done runs exactly once.
  void Submit(SequenceRequest request);

  // Whether the pool keeps the blocks no sequence holds (free and cached
  // ones) for the next sequences; it does from Create. With false, the
  // pool frees them (KvBlockPool::ReleaseUnheld) between two steps, on the
  // step thread, and this returns once they are freed, or at once after
  // Stop; from then on, until called with true, every block is freed at
  // the end of the step in which its last sequence gives it back. The
  // running sequences keep their blocks; later ones allocate blocks again.
  void KeepUnheldBlocks(bool keep) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every waiting and running sequence with UNAVAILABLE, refuses new
  // ones, and joins the step thread. Idempotent.
  void Stop();

  SchedulerStats stats() const;

 private:
  struct Sequence;  // One request and its state (generation_scheduler.cc).
  using SequencePtr = std::unique_ptr<Sequence>;

  GenerationScheduler(const Model& model, const IncrementalDecoder& decoder,
                      const SchedulerOptions& options,
                      std::unique_ptr<KvBlockPool> pool);

  // The step thread: steps while there are sequences, until Stop.
  void StepLoop();
  // Blocks until a sequence waits or runs or a release is asked for (true),
  // or Stop (false).
  bool WaitForWork() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the releases asked for since the last one, if any; frees the
  // unheld blocks anyway while the pool keeps none. Once per loop, after
  // the step.
  void ReleaseIfAsked() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the waiting and running sequences whose deadline passed or which
  // are cancelled.
  void ReapExpired() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the blocks the running sequences' next tokens need, preempting
  // the newest when the pool is empty.
  void GrowRunning() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves waiting sequences into the batch while they fit.
  void Admit() ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a joining sequence's reused and computed tokens.
  void CountPrefix(int64_t reused, int64_t computed);
  // One forward over the running sequences and a token for each.
  void RunStep();
  // Adds `token` to `sequence` (on_logprobs, on_token); true when that ends
  // it.
  static bool Commit(Sequence& sequence, SampledToken token);
  // Frees the running sequence `index`'s blocks and removes it; on_done.
  void Finish(size_t index, absl::StatusOr<GenerationResult> result);
  // Preempts running sequence `index` back to the front of the line.
  void Preempt(size_t index) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every waiting and running sequence with `status`.
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  void SetRunningCount() ABSL_LOCKS_EXCLUDED(mu_);

  const Model& model_;
  const IncrementalDecoder& decoder_;
  const SchedulerOptions options_;
  const std::unique_ptr<KvBlockPool> pool_;
  // Set by Stop: a running forward ends at its next module.
  Cancellation stopped_;
  std::atomic<int64_t> prefix_hit_tokens_{0};
  std::atomic<int64_t> prefix_miss_tokens_{0};

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // In arrival order; preempted sequences go back to the front.
  std::deque<SequencePtr> waiting_ ABSL_GUARDED_BY(mu_);
  // running_.size(), for Submit and stats.
  int64_t running_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiting sequences taken out of waiting_ while ReapExpired polls them
  // (outside mu_): they still count as waiting.
  int64_t reaping_ ABSL_GUARDED_BY(mu_) = 0;
  // KeepUnheldBlocks(false) calls, and those the step thread has run.
  int64_t releases_asked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t releases_done_ ABSL_GUARDED_BY(mu_) = 0;
  // The last KeepUnheldBlocks's argument; read by the step thread after
  // every step.
  std::atomic<bool> keep_unheld_{true};

  // The step thread's: in the order they joined (newest last).
  std::vector<SequencePtr> running_;

  absl::Mutex join_mu_;  // Serializes Stop's join.
  std::unique_ptr<platform::Thread> thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_GENERATION_SCHEDULER_H_
