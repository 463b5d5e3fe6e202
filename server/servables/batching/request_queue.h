// RequestQueue: a served model's waiting requests, in arrival order, with
// their deadlines and cancellation. It refuses requests beyond its size and
// after Stop, hands batches to instances as a BatchPlanner forms them, and
// takes out requests whose deadline or queue timeout passed or whose client
// cancelled (DropExpired; the model's reaper thread polls it every few
// milliseconds, instances before each batch). It also counts the requests
// taken out to run until FinishRunning, so that pending_requests() covers
// queued and running ones.
//
// Thread-safe: one mutex guards everything.
#ifndef CASTSERVE_SERVER_SERVABLES_BATCHING_REQUEST_QUEUE_H_
#define CASTSERVE_SERVER_SERVABLES_BATCHING_REQUEST_QUEUE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "proto/model_config.pb.h"
#include "server/servables/batching/batch_planner.h"
#include "server/servables/batching/queued_request.h"

namespace castserve {

class RequestQueue {
 public:
  struct Options {
    // For messages: "the queue of model <name> is full".
    std::string model_name;
    int64_t max_queue_size = 1024;
    // Bounds each request's time in the queue (its deadline may be sooner).
    absl::Duration queue_timeout = absl::InfiniteDuration();
    // How often WaitForExpired wakes to poll cancellation.
    absl::Duration cancellation_poll_interval = absl::Milliseconds(5);
    // What enqueue times, deadlines and timeouts are read from and waited on
    // (not owned; outlives the queue).
    platform::Clock* clock = &platform::Clock::Real();
  };

  // The queue policy of `config` (default_queue_policy; max_queue_size 0
  // means 1024, default_timeout_microseconds 0 means none).
  static Options OptionsFromConfig(const inference::ModelConfig& config);

  explicit RequestQueue(Options options) : options_(std::move(options)) {}

  // Sets `queued`'s enqueue time and queue deadline and appends it. If the
  // queue is full (RESOURCE_EXHAUSTED) or stopped (UNAVAILABLE) returns that
  // status and leaves `queued` with the caller.
  absl::Status Push(QueuedPtr& queued) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for the next batch `planner` forms and moves it to `batch`
  // (counted as running). Requests that expired or were cancelled meanwhile
  // come back in `dropped` first (then `batch` stays empty). False once
  // stopped.
  bool NextBatch(const BatchPlanner& planner, std::vector<QueuedPtr>* batch,
                 std::vector<Rejection>* dropped) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until a queued request's deadline passes or a poll interval ends,
  // then takes out expired and cancelled requests into `dropped`. False
  // once stopped.
  bool WaitForExpired(std::vector<Rejection>* dropped) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses every later Push, wakes every waiter and returns the queued
  // requests, each with UNAVAILABLE.
  std::vector<Rejection> Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One request taken by NextBatch has completed.
  void FinishRunning() ABSL_LOCKS_EXCLUDED(mu_);

  // Queued plus running requests.
  int64_t pending_requests() const ABSL_LOCKS_EXCLUDED(mu_);

  // What enqueue times and deadlines are times of: every duration measured
  // from a queued request's enqueue_time reads it too.
  platform::Clock& clock() const { return *options_.clock; }

 private:
  void DropExpiredLocked(absl::Time now, std::vector<Rejection>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time EarliestDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeLocked(const BatchPlan& plan, std::vector<QueuedPtr>* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnavailableStatus() const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<QueuedPtr> queue_ ABSL_GUARDED_BY(mu_);
  // Changes whenever the queue does, so that waiting instances re-plan.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_BATCHING_REQUEST_QUEUE_H_
