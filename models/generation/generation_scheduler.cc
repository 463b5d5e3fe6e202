#include "models/generation/generation_scheduler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/InferenceMode.h"
#include "casting/device/device_codec.h"
#include "casting/memory/tracking_allocator.h"
#include "models/generation/sampling.h"

namespace castserve::models {
namespace {

absl::Status CheckOptions(const SchedulerOptions& options) {
  struct Bound {
    const char* name;
    int64_t value;
    int64_t min;
  };
  for (const Bound& b : {Bound{"pool_bytes", options.pool_bytes, 1},
                         Bound{"block_tokens", options.block_tokens, 1},
                         Bound{"max_running", options.max_running, 1},
                         Bound{"max_waiting", options.max_waiting, 0}}) {
    if (b.value < b.min) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler option ", b.name, " is ", b.value,
                       "; it must be >= ", b.min));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct GenerationScheduler::Sequence {
  Sequence(SequenceRequest r, Sampler s)
      : request(std::move(r)),
        sampler(std::move(s)),
        history(request.generation.prompt()),
        pending(request.generation.prompt()) {}

  // CANCELLED or DEADLINE_EXCEEDED when the sequence must end now.
  absl::Status Expired(absl::Time now) const {
    if (request.is_cancelled && request.is_cancelled()) {
      return absl::CancelledError("the sequence was cancelled");
    }
    if (now >= request.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the sequence's deadline passed after ",
                       result.tokens.size(), " new tokens"));
    }
    return absl::OkStatus();
  }

  void Done(absl::StatusOr<GenerationResult> outcome) {
    if (request.on_done) request.on_done(std::move(outcome));
  }

  SequenceRequest request;
  Sampler sampler;
  std::vector<int64_t> history;  // The prompt and the new tokens.
  // Fed at the next step: the history when joining, else the last token.
  std::vector<int64_t> pending;
  GenerationResult result;
  std::unique_ptr<PagedKvCache> cache;  // While running.
};

absl::StatusOr<std::unique_ptr<GenerationScheduler>>
GenerationScheduler::Create(const Model& model,
                            const SchedulerOptions& options) {
  absl::StatusOr<const IncrementalDecoder*> decoder = DecoderOf(model);
  if (!decoder.ok()) return decoder.status();
  absl::Status valid = CheckOptions(options);
  if (!valid.ok()) return valid;
  absl::StatusOr<std::unique_ptr<KvBlockPool>> pool =
      KvBlockPool::Create((*decoder)->kv_cache_shape(), options.block_tokens,
                          options.pool_bytes, options.prefix_caching);
  if (!pool.ok()) return pool.status();
  SchedulerOptions resolved = options;
  if (resolved.model_tag.empty()) {
    resolved.model_tag = casting::ScopedModelTag::CurrentModelId();
  }
  auto scheduler = std::unique_ptr<GenerationScheduler>(
      new GenerationScheduler(model, **decoder, resolved, *std::move(pool)));
  GenerationScheduler* self = scheduler.get();
  absl::MutexLock lock(&scheduler->join_mu_);
  scheduler->thread_ =
      platform::Executor::Default().StartThread([self] { self->StepLoop(); });
  return scheduler;
}

GenerationScheduler::GenerationScheduler(const Model& model,
                                         const IncrementalDecoder& decoder,
                                         const SchedulerOptions& options,
                                         std::unique_ptr<KvBlockPool> pool)
    : model_(model),
      decoder_(decoder),
      options_(options),
      pool_(std::move(pool)) {}

GenerationScheduler::~GenerationScheduler() { Stop(); }

void GenerationScheduler::Submit(SequenceRequest request) {
  absl::Status checked;
  if (!CheckedFor(request.generation, decoder_)) {
    checked = absl::InternalError(
        "a sequence checked against another model was submitted");
  }
  const int64_t prompt =
      static_cast<int64_t>(request.generation.prompt().size());
  if (checked.ok() && pool_->BlocksFor(prompt + 1) > pool_->capacity_blocks()) {
    checked = absl::ResourceExhaustedError(absl::StrCat(
        "a prompt of ", prompt, " tokens needs ", pool_->BlocksFor(prompt + 1),
        " KV blocks of ", pool_->block_tokens(), " tokens; the pool has ",
        pool_->capacity_blocks()));
  }
  if (!checked.ok()) {
    if (request.on_done) request.on_done(checked);
    return;
  }
  Sampler sampler = Sampler::ForChecked(request.generation.options().sampling);
  auto sequence =
      std::make_unique<Sequence>(std::move(request), std::move(sampler));
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    const int64_t places =
        std::max<int64_t>(0, options_.max_running - running_count_);
    const int64_t waiting = static_cast<int64_t>(waiting_.size()) + reaping_;
    if (stopping_) {
      refused = absl::UnavailableError("the generation scheduler is stopped");
    } else if (waiting >= options_.max_waiting + places) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("the generation queue is full (", options_.max_waiting,
                       " sequences waiting)"));
    } else {
      waiting_.push_back(std::move(sequence));
    }
  }
  if (!refused.ok()) sequence->Done(refused);
}

void GenerationScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stopped_.Cancel("the generation scheduler is stopping");
  absl::MutexLock lock(&join_mu_);
  if (thread_ != nullptr) {
    thread_->Join();
    thread_.reset();
  }
}

void GenerationScheduler::KeepUnheldBlocks(bool keep) {
  keep_unheld_.store(keep, std::memory_order_relaxed);
  if (keep) return;
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const int64_t ticket = ++releases_asked_;
  auto released = [this, ticket]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || releases_done_ >= ticket;
  };
  mu_.Await(absl::Condition(&released));
}

void GenerationScheduler::ReleaseIfAsked() {
  int64_t asked;
  {
    absl::MutexLock lock(&mu_);
    asked = releases_asked_;
    if (asked == releases_done_ &&
        keep_unheld_.load(std::memory_order_relaxed)) {
      return;
    }
  }
  pool_->ReleaseUnheld();
  absl::MutexLock lock(&mu_);
  releases_done_ = asked;
}

SchedulerStats GenerationScheduler::stats() const {
  absl::MutexLock lock(&mu_);
  SchedulerStats stats;
  stats.pool_capacity_bytes = pool_->capacity_bytes();
  stats.kv_bytes_in_use = pool_->in_use_bytes();
  stats.kv_bytes_peak = pool_->peak_bytes();
  stats.kv_bytes_allocated = pool_->allocated_bytes();
  stats.prefix_cache_hit_tokens =
      prefix_hit_tokens_.load(std::memory_order_relaxed);
  stats.prefix_cache_miss_tokens =
      prefix_miss_tokens_.load(std::memory_order_relaxed);
  stats.prefix_cache_bytes = pool_->cached_bytes();
  stats.running = running_count_;
  stats.waiting = static_cast<int64_t>(waiting_.size()) + reaping_;
  return stats;
}

void GenerationScheduler::StepLoop() {
  // The pool's blocks and every step's transients count for the model.
  casting::ScopedModelTag tag(options_.model_tag);
  while (WaitForWork()) {
    ReapExpired();
    GrowRunning();
    Admit();
    if (!running_.empty()) RunStep();
    // After the step: the releases asked for, and while the pool keeps no
    // unheld block, those the step's finished sequences gave back.
    ReleaseIfAsked();
  }
  FailAll(absl::UnavailableError("the generation scheduler stopped"));
}

bool GenerationScheduler::WaitForWork() {
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !waiting_.empty() || running_count_ > 0 ||
           releases_asked_ > releases_done_;
  };
  absl::MutexLock lock(&mu_, absl::Condition(&ready));
  return !stopping_;
}

void GenerationScheduler::ReapExpired() {
  const absl::Time now = options_.clock->Now();
  // The callbacks run outside mu_ (they may take their owner's locks).
  std::deque<SequencePtr> polled;
  {
    absl::MutexLock lock(&mu_);
    polled.swap(waiting_);
    reaping_ = static_cast<int64_t>(polled.size());
  }
  std::deque<SequencePtr> kept;
  for (SequencePtr& sequence : polled) {
    absl::Status expired = sequence->Expired(now);
    if (expired.ok()) {
      kept.push_back(std::move(sequence));
    } else {
      sequence->Done(expired);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    // Those that arrived meanwhile queue behind.
    waiting_.insert(waiting_.begin(), std::make_move_iterator(kept.begin()),
                    std::make_move_iterator(kept.end()));
    reaping_ = 0;
  }
  for (size_t i = 0; i < running_.size();) {
    absl::Status expired = running_[i]->Expired(now);
    if (expired.ok()) {
      ++i;
    } else {
      Finish(i, expired);
    }
  }
}

void GenerationScheduler::GrowRunning() {
  for (size_t i = 0; i < running_.size();) {
    Sequence& sequence = *running_[i];
    const int64_t tokens = sequence.cache->length() +
                           static_cast<int64_t>(sequence.pending.size());
    if (sequence.cache->Reserve(tokens).ok()) {
      sequence.result.kv_cache_bytes =
          std::max(sequence.result.kv_cache_bytes, sequence.cache->bytes());
      ++i;
    } else if (running_.size() == 1) {
      Finish(i, absl::ResourceExhaustedError(
                    absl::StrCat("a sequence of ", tokens,
                                 " tokens needs more KV blocks "
                                 "than the pool's ",
                                 pool_->capacity_blocks(), " of ",
                                 pool_->block_tokens(), " tokens")));
    } else {
      // The newest makes room (when it is this one, it waits itself).
      Preempt(running_.size() - 1);
    }
  }
}

void GenerationScheduler::Admit() {
  while (static_cast<int64_t>(running_.size()) < options_.max_running) {
    SequencePtr next;
    std::unique_ptr<PagedKvCache> cache;
    bool fits = true;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) return;
      const std::vector<int64_t>& history = waiting_.front()->history;
      const int64_t tokens = static_cast<int64_t>(history.size());
      cache = std::make_unique<PagedKvCache>(*pool_);
      // At least the last token runs, for its logits.
      cache->ReuseCachedPrefix(absl::MakeConstSpan(history).first(tokens - 1));
      const int64_t shared = pool_->BlocksFor(cache->capacity());
      fits = pool_->BlocksFor(tokens + 1) - shared <= pool_->free_blocks();
      // With nothing running the whole pool is free: it never will fit.
      // (Returning gives the shared blocks back.)
      if (!fits && !running_.empty()) return;
      next = std::move(waiting_.front());
      waiting_.pop_front();
    }
    const int64_t tokens = static_cast<int64_t>(next->history.size()) + 1;
    absl::Status reserved = fits ? cache->Reserve(tokens)
                                 : absl::ResourceExhaustedError(absl::StrCat(
                                       "a sequence of ", tokens,
                                       " tokens needs more KV blocks "
                                       "than the pool's ",
                                       pool_->capacity_blocks()));
    if (!reserved.ok()) {
      cache.reset();
      next->Done(reserved);
      continue;
    }
    const int64_t reused = cache->length();
    next->pending.assign(next->history.begin() + reused, next->history.end());
    CountPrefix(reused, static_cast<int64_t>(next->pending.size()));
    next->cache = std::move(cache);
    next->result.kv_cache_bytes =
        std::max(next->result.kv_cache_bytes, next->cache->bytes());
    running_.push_back(std::move(next));
    SetRunningCount();
  }
}

void GenerationScheduler::CountPrefix(int64_t reused, int64_t computed) {
  if (!options_.prefix_caching) return;
  prefix_hit_tokens_.fetch_add(reused, std::memory_order_relaxed);
  prefix_miss_tokens_.fetch_add(computed, std::memory_order_relaxed);
}

void GenerationScheduler::RunStep() {
  std::vector<IncrementalDecoder::Segment> segments;
  std::vector<int64_t> ids;
  for (const SequencePtr& sequence : running_) {
    segments.push_back({sequence->cache.get(),
                        static_cast<int64_t>(sequence->pending.size())});
    ids.insert(ids.end(), sequence->pending.begin(), sequence->pending.end());
  }
  // The step is one forward: a demotion of the model waits for it.
  const Model::ForwardPass pass = model_.EnterForward();
  absl::StatusOr<at::Tensor> logits =
      CatchExceptions([&]() -> absl::StatusOr<at::Tensor> {
        c10::InferenceMode inference_mode;
        // One context per step: its compute copies go when the step ends.
        ForwardContext context(&stopped_);
        at::Tensor device_ids = casting::ToDevice(
            at::tensor(ids, at::TensorOptions().dtype(at::kLong)),
            model_.device());
        at::Tensor out = decoder_.DecodeBatch(context, device_ids, segments,
                                              /*last_only=*/true);
        return out.is_cpu() ? out : out.cpu();
      });
  if (!logits.ok()) {
    if (stopped_.cancelled()) return;  // StepLoop ends them: UNAVAILABLE.
    while (!running_.empty()) Finish(running_.size() - 1, logits.status());
    return;
  }
  // Every cached position's id is in the history now.
  for (const SequencePtr& sequence : running_) {
    sequence->cache->PublishFullBlocks(sequence->history);
  }
  size_t i = 0;
  for (int64_t row = 0; row < logits->size(0); ++row) {
    Sequence& sequence = *running_[i];
    if (Commit(sequence,
               sequence.sampler.Next((*logits)[row], sequence.history))) {
      Finish(i, std::move(sequence.result));
    } else {
      ++i;
    }
  }
}

bool GenerationScheduler::Commit(Sequence& sequence, SampledToken sampled) {
  GenerationResult& result = sequence.result;
  const GenerationOptions& options = sequence.request.generation.options();
  const int64_t token = sampled.id;
  if (sampled.logprobs) {
    if (sequence.request.on_logprobs) {
      sequence.request.on_logprobs(*sampled.logprobs);
    }
    result.logprobs.push_back(*std::move(sampled.logprobs));
  }
  result.tokens.push_back(token);
  sequence.history.push_back(token);
  sequence.pending = {token};
  const bool more =
      !sequence.request.on_token || sequence.request.on_token(token);
  if (std::optional<GenerationResult::Stop> stop = StopByIdOf(options, token)) {
    result.stop = *stop;
  } else if (!more) {
    result.stop = GenerationResult::Stop::kStoppedByCaller;
  } else if (static_cast<int64_t>(result.tokens.size()) >=
             options.max_new_tokens) {
    result.stop = GenerationResult::Stop::kMaxNewTokens;
  } else {
    return false;
  }
  return true;
}

void GenerationScheduler::Finish(size_t index,
                                 absl::StatusOr<GenerationResult> result) {
  SequencePtr sequence = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  sequence->cache.reset();  // The blocks go back before on_done.
  SetRunningCount();
  sequence->Done(std::move(result));
}

void GenerationScheduler::Preempt(size_t index) {
  SequencePtr sequence = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  sequence->cache.reset();
  // Joining again recomputes the cache of every token so far.
  sequence->pending = sequence->history;
  absl::MutexLock lock(&mu_);
  waiting_.push_front(std::move(sequence));
  running_count_ = static_cast<int64_t>(running_.size());
}

void GenerationScheduler::FailAll(const absl::Status& status) {
  while (!running_.empty()) Finish(running_.size() - 1, status);
  std::deque<SequencePtr> waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(waiting_);
  }
  for (SequencePtr& sequence : waiting) sequence->Done(status);
}

void GenerationScheduler::SetRunningCount() {
  absl::MutexLock lock(&mu_);
  running_count_ = static_cast<int64_t>(running_.size());
}

}  // namespace castserve::models
