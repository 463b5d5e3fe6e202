#include "platform/executor.h"

#include <list>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace castserve::platform {
namespace {

class StdThread final : public Thread {
 public:
  explicit StdThread(std::function<void()> work) : thread_(std::move(work)) {}
  ~StdThread() override { Join(); }
  void Join() override {
    if (thread_.joinable()) thread_.join();
  }
  bool IsCurrent() const override {
    return thread_.get_id() == std::this_thread::get_id();
  }

 private:
  std::thread thread_;
};

class ThreadExecutor final : public Executor {
 public:
  ~ThreadExecutor() override { Drain(); }

  std::unique_ptr<Thread> StartThread(std::function<void()> work) override {
    return std::make_unique<StdThread>(std::move(work));
  }

  void Schedule(std::function<void()> work) override {
    JoinFinished();
    absl::MutexLock lock(&mu_);
    ++running_;
    // The lock is held until the new thread's handle is in its entry, so
    // the thread cannot mark the entry finished before it is complete.
    auto entry = threads_.emplace(threads_.end());
    entry->thread =
        std::make_unique<StdThread>([this, entry, work = std::move(work)] {
          work();
          absl::MutexLock lock(&mu_);
          entry->finished = true;
          --running_;
        });
  }

  // A scheduled item joins it: it returns as soon as the thread has, and
  // the next Schedule or Drain joins the item's own thread, so handed-over
  // threads do not pile up unjoined in a long-running daemon.
  void JoinLater(std::unique_ptr<Thread> thread) override {
    std::shared_ptr<Thread> shared(std::move(thread));
    Schedule([shared] { shared->Join(); });
  }

  void Drain() override {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* running) { return *running == 0; }, &running_));
    }
    JoinFinished();
  }

 private:
  struct Entry {
    std::unique_ptr<Thread> thread;
    bool finished = false;
  };

  // Joins the threads whose work has returned (they are about to exit).
  void JoinFinished() {
    std::list<Entry> finished;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = threads_.begin(); it != threads_.end();) {
        auto next = std::next(it);
        if (it->finished) finished.splice(finished.end(), threads_, it);
        it = next;
      }
    }
    finished.clear();  // Joins, unlocked.
  }

  absl::Mutex mu_;
  std::list<Entry> threads_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Executor> NewThreadExecutor() {
  return std::make_unique<ThreadExecutor>();
}

Executor& Executor::Default() {
  static Executor* const executor = NewThreadExecutor().release();
  return *executor;
}

}  // namespace castserve::platform
