#include "platform/test_util/manual_executor.h"

#include <utility>

namespace castserve::platform::test_util {

ManualExecutor::ManualExecutor() : threads_(NewThreadExecutor()) {}

ManualExecutor::~ManualExecutor() { Drain(); }

std::unique_ptr<Thread> ManualExecutor::StartThread(
    std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    ++threads_started_;
  }
  return threads_->StartThread(std::move(work));
}

void ManualExecutor::Schedule(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
}

void ManualExecutor::JoinLater(std::unique_ptr<Thread> thread) {
  threads_->JoinLater(std::move(thread));
}

int ManualExecutor::RunPending() {
  std::deque<std::function<void()>> work;
  {
    absl::MutexLock lock(&mu_);
    work.swap(queue_);
  }
  for (auto& item : work) item();
  return static_cast<int>(work.size());
}

void ManualExecutor::Drain() {
  while (RunPending() > 0) {
  }
  threads_->Drain();
}

int ManualExecutor::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int ManualExecutor::threads_started() const {
  absl::MutexLock lock(&mu_);
  return threads_started_;
}

}  // namespace castserve::platform::test_util
