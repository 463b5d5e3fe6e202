// A GenerationEngine for tests: one step thread that answers each sequence,
// in submission order, with the tokens `next_token(prompt, step)` chooses,
// one per step (`step_time` apart), as the scheduler would: EOS / stop ids
// and max_new_tokens end it, on_token returning false ends it, cancellation
// and the deadline are checked before every step, Stop ends everything with
// UNAVAILABLE. Each running sequence holds `kv_bytes_per_token` per token
// (prompt included) in stats() until it ends.
#ifndef CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_ENGINE_H_
#define CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_ENGINE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/servables/generation/generation_engine.h"

namespace castserve::test_util {

class FakeGenerationEngine final : public GenerationEngine {
 public:
  static constexpr int64_t kv_bytes_per_token = 1000;
  using NextToken =
      std::function<int64_t(const std::vector<int64_t>& prompt, int64_t step)>;

  explicit FakeGenerationEngine(
      NextToken next_token, absl::Duration step_time = absl::Milliseconds(1))
      : next_token_(std::move(next_token)),
        step_time_(step_time),
        thread_([this] { Loop(); }) {}
  ~FakeGenerationEngine() override { Stop(); }

  void Submit(models::SequenceRequest request) override {
    absl::MutexLock lock(&mutex_);
    if (stopped_) {
      request.on_done(absl::UnavailableError("stopped"));
      return;
    }
    queue_.push_back(std::move(request));
  }

  void Stop() override {
    {
      absl::MutexLock lock(&mutex_);
      stopped_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  models::SchedulerStats stats() const override {
    absl::MutexLock lock(&mutex_);
    return stats_;
  }

  void set_pool_capacity_bytes(int64_t bytes) {
    absl::MutexLock lock(&mutex_);
    stats_.pool_capacity_bytes = bytes;
  }

  // Counts the releases (calls with false); no KV bytes are allocated
  // beyond those in use.
  void KeepUnheldBlocks(bool keep) override {
    absl::MutexLock lock(&mutex_);
    keeps_unheld_ = keep;
    if (!keep) ++releases_;
  }
  int64_t releases() const {
    absl::MutexLock lock(&mutex_);
    return releases_;
  }
  bool keeps_unheld() const {
    absl::MutexLock lock(&mutex_);
    return keeps_unheld_;
  }

  int64_t submitted() const {
    absl::MutexLock lock(&mutex_);
    return submitted_;
  }

 private:
  void SetKvBytes(int64_t bytes) {
    absl::MutexLock lock(&mutex_);
    stats_.kv_bytes_in_use = bytes;
    stats_.kv_bytes_peak = std::max(stats_.kv_bytes_peak, bytes);
    stats_.kv_bytes_allocated = bytes;
  }

  // The sequence's result or error, running it step by step.
  absl::StatusOr<models::GenerationResult> Run(
      const models::SequenceRequest& request) {
    models::GenerationResult result;
    const auto& options = request.generation.options();
    const std::vector<int64_t>& prompt = request.generation.prompt();
    for (int64_t step = 0; step < options.max_new_tokens; ++step) {
      {
        absl::MutexLock lock(&mutex_);
        if (stopped_) return absl::UnavailableError("the engine stopped");
      }
      if (request.is_cancelled && request.is_cancelled()) {
        return absl::CancelledError("cancelled");
      }
      if (absl::Now() > request.deadline) {
        return absl::DeadlineExceededError("deadline");
      }
      absl::SleepFor(step_time_);
      const int64_t token = next_token_(prompt, step);
      result.tokens.push_back(token);
      SetKvBytes(kv_bytes_per_token *
                 static_cast<int64_t>(prompt.size() + step + 1));
      result.kv_cache_bytes = stats().kv_bytes_in_use;
      const bool more = !request.on_token || request.on_token(token);
      auto in = [token](const std::vector<int64_t>& ids) {
        return std::find(ids.begin(), ids.end(), token) != ids.end();
      };
      if (in(options.eos_token_ids)) {
        result.stop = models::GenerationResult::Stop::kEos;
        return result;
      }
      if (in(options.stop_token_ids) || !more) {
        result.stop = models::GenerationResult::Stop::kStopToken;
        return result;
      }
    }
    result.stop = models::GenerationResult::Stop::kMaxNewTokens;
    return result;
  }

  void Loop() {
    while (true) {
      std::optional<models::SequenceRequest> request;
      {
        absl::MutexLock lock(&mutex_);
        mutex_.Await(absl::Condition(
            +[](FakeGenerationEngine* self) {
              self->mutex_.AssertHeld();
              return self->stopped_ || !self->queue_.empty();
            },
            this));
        if (queue_.empty()) return;
        request.emplace(std::move(queue_.front()));
        queue_.pop_front();
        ++submitted_;
      }
      absl::StatusOr<models::GenerationResult> result = Run(*request);
      SetKvBytes(0);
      request->on_done(std::move(result));
    }
  }

  const NextToken next_token_;
  const absl::Duration step_time_;
  mutable absl::Mutex mutex_;
  std::deque<models::SequenceRequest> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopped_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t submitted_ ABSL_GUARDED_BY(mutex_) = 0;
  models::SchedulerStats stats_ ABSL_GUARDED_BY(mutex_);
  int64_t releases_ ABSL_GUARDED_BY(mutex_) = 0;
  bool keeps_unheld_ ABSL_GUARDED_BY(mutex_) = true;
  std::thread thread_;
};

}  // namespace castserve::test_util

#endif  // CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_ENGINE_H_
