// The seam through which castserve starts threads (in the spirit of
// LevelDB's Env::StartThread/Schedule): every thread the daemon starts is
// either owned by a Thread handle that joins it, or runs work scheduled on an
// Executor, which Drain waits for and joins. Nothing is detached. Tests
// substitute test_util/manual_executor.h to run scheduled work when they
// choose.
#ifndef CASTSERVE_PLATFORM_EXECUTOR_H_
#define CASTSERVE_PLATFORM_EXECUTOR_H_

#include <functional>
#include <memory>

namespace castserve::platform {

// A started thread. Join waits for it to finish; the destructor joins if
// Join was not called. Neither may be called from the thread itself (hand
// the handle to Executor::JoinLater instead). Thread-compatible.
class Thread {
 public:
  virtual ~Thread() = default;
  virtual void Join() = 0;
  // True when called from this thread.
  virtual bool IsCurrent() const = 0;
};

// Thread-safe.
class Executor {
 public:
  virtual ~Executor() = default;

  // Starts `work` on a thread of its own, now. The caller owns the thread
  // and joins it (Thread).
  virtual std::unique_ptr<Thread> StartThread(std::function<void()> work) = 0;

  // Runs `work` on a thread the executor owns, without blocking the caller
  // (work that may block: a model load, a wait for one). Drain waits for it.
  virtual void Schedule(std::function<void()> work) = 0;

  // Takes a thread its owner cannot join now because it is running on it
  // (a worker that stops its own pool): it is joined once it has returned,
  // and Drain waits for that.
  virtual void JoinLater(std::unique_ptr<Thread> thread) = 0;

  // Blocks until every scheduled work item has returned (also those it
  // scheduled meanwhile) and joins every thread the executor owns. The
  // executor stays usable. Must not be called from work it runs.
  virtual void Drain() = 0;

  // The process's executor for code that is not handed one (codec chunks, a
  // model's instance threads); never destroyed. The daemon drains it last.
  static Executor& Default();
};

// Executor on plain threads: one thread per scheduled work item (a load may
// wait seconds; a pool would queue a first-request load behind another).
// Finished threads are joined by the next Schedule or Drain. Destroying it
// drains it.
std::unique_ptr<Executor> NewThreadExecutor();

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_EXECUTOR_H_
