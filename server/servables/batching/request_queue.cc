#include "server/servables/batching/request_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace castserve {

RequestQueue::Options RequestQueue::OptionsFromConfig(
    const inference::ModelConfig& config) {
  Options options;
  options.model_name = config.name();
  const inference::ModelQueuePolicy& policy =
      config.dynamic_batching().default_queue_policy();
  if (policy.max_queue_size() > 0) {
    options.max_queue_size = policy.max_queue_size();
  }
  if (policy.default_timeout_microseconds() > 0) {
    options.queue_timeout =
        absl::Microseconds(policy.default_timeout_microseconds());
  }
  return options;
}

absl::Status RequestQueue::UnavailableStatus() const {
  return absl::UnavailableError(
      absl::StrCat("model ", options_.model_name, " is unloading"));
}

absl::Status RequestQueue::Push(QueuedPtr& queued) {
  queued->enqueue_time = options_.clock->Now();
  queued->queue_deadline =
      std::min(queued->deadline, queued->enqueue_time + options_.queue_timeout);
  absl::MutexLock lock(&mu_);
  if (stopped_) return UnavailableStatus();
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue of model ", options_.model_name, " is full (",
                     options_.max_queue_size, " requests)"));
  }
  queue_.push_back(std::move(queued));
  ++generation_;
  return absl::OkStatus();
}

bool RequestQueue::NextBatch(const BatchPlanner& planner,
                             std::vector<QueuedPtr>* batch,
                             std::vector<Rejection>* dropped) {
  absl::MutexLock lock(&mu_);
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || !queue_.empty();
  };
  for (;;) {
    mu_.Await(absl::Condition(&has_work));
    if (stopped_) return false;
    const absl::Time now = options_.clock->Now();
    DropExpiredLocked(now, dropped);
    if (!dropped->empty()) return true;  // Answer those first.
    if (queue_.empty()) continue;
    const BatchPlan plan = planner.Plan(queue_);
    const absl::Time flush_time = planner.FlushTime(*queue_.front());
    if (plan.ready || now >= flush_time) {
      TakeLocked(plan, batch);
      return true;
    }
    const uint64_t generation = generation_;
    auto changed = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || generation_ != generation;
    };
    options_.clock->AwaitWithDeadline(&mu_, absl::Condition(&changed),
                                      flush_time);
  }
}

bool RequestQueue::WaitForExpired(std::vector<Rejection>* dropped) {
  absl::MutexLock lock(&mu_);
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || !queue_.empty();
  };
  mu_.Await(absl::Condition(&has_work));
  const absl::Time wake =
      std::min(options_.clock->Now() + options_.cancellation_poll_interval,
               EarliestDeadlineLocked());
  options_.clock->AwaitWithDeadline(&mu_, absl::Condition(&stopped_), wake);
  if (stopped_) return false;
  DropExpiredLocked(options_.clock->Now(), dropped);
  return true;
}

std::vector<Rejection> RequestQueue::Stop() {
  std::vector<Rejection> queued;
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  for (QueuedPtr& request : queue_) {
    queued.push_back({std::move(request), UnavailableStatus()});
  }
  queue_.clear();
  ++generation_;
  return queued;
}

void RequestQueue::FinishRunning() {
  absl::MutexLock lock(&mu_);
  --running_;
}

int64_t RequestQueue::pending_requests() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

void RequestQueue::TakeLocked(const BatchPlan& plan,
                              std::vector<QueuedPtr>* batch) {
  for (size_t index : plan.indices) {
    batch->push_back(std::move(queue_[index]));
  }
  // Indices ascend: erase from the back so the others stay valid.
  for (auto it = plan.indices.rbegin(); it != plan.indices.rend(); ++it) {
    queue_.erase(queue_.begin() + *it);
  }
  running_ += static_cast<int64_t>(batch->size());
  ++generation_;
}

void RequestQueue::DropExpiredLocked(absl::Time now,
                                     std::vector<Rejection>* dropped) {
  const size_t before = dropped->size();
  for (auto it = queue_.begin(); it != queue_.end();) {
    QueuedRequest& queued = **it;
    absl::Status status;
    if (now >= queued.queue_deadline) {
      status = absl::DeadlineExceededError(
          queued.queue_deadline < queued.deadline
              ? "the request's queue timeout passed while it was queued"
              : "the request's deadline passed while it was queued");
    } else if (queued.is_cancelled && queued.is_cancelled()) {
      status = absl::CancelledError("the request was cancelled while queued");
    }
    if (status.ok()) {
      ++it;
      continue;
    }
    dropped->push_back({std::move(*it), std::move(status)});
    it = queue_.erase(it);
  }
  if (dropped->size() != before) ++generation_;
}

absl::Time RequestQueue::EarliestDeadlineLocked() const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const QueuedPtr& queued : queue_) {
    earliest = std::min(earliest, queued->queue_deadline);
  }
  return earliest;
}

}  // namespace castserve
