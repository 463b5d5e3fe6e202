// An Executor for tests: scheduled work waits until the test runs it
// (RunPending, or Drain), so a test decides when a background load or a
// deferred call happens and can see that one was scheduled at all. Threads
// from StartThread are real (their owners join them) and counted.
#ifndef CASTSERVE_PLATFORM_TEST_UTIL_MANUAL_EXECUTOR_H_
#define CASTSERVE_PLATFORM_TEST_UTIL_MANUAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "platform/executor.h"

namespace castserve::platform::test_util {

// Thread-safe. Destroying it drains it.
class ManualExecutor final : public Executor {
 public:
  ManualExecutor();
  ~ManualExecutor() override;

  std::unique_ptr<Thread> StartThread(std::function<void()> work) override;
  // Queues `work`; nothing runs it until RunPending or Drain.
  void Schedule(std::function<void()> work) override;
  void JoinLater(std::unique_ptr<Thread> thread) override;
  // Runs the queued work on the calling thread until none is queued.
  void Drain() override;

  // Runs the work queued now (not what it schedules) on the calling
  // thread; returns how many items ran.
  int RunPending();
  int pending() const;
  int threads_started() const;

 private:
  const std::unique_ptr<Executor> threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int threads_started_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace castserve::platform::test_util

#endif  // CASTSERVE_PLATFORM_TEST_UTIL_MANUAL_EXECUTOR_H_
