#ifndef CASTSERVE_SERVER_HTTP_SOCKET_DEADLINES_H_
#define CASTSERVE_SERVER_HTTP_SOCKET_DEADLINES_H_

#include <map>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "platform/executor.h"

namespace castserve {

// Ends connections that outlive their deadline: a thread of its own wakes
// every `check_interval` and shuts down (shutdown(2), both directions) each
// socket whose deadline passed, so that whoever polls the socket sees it end
// and closes it. It never closes a descriptor. Thread-safe.
//
// The owner of the sockets must call Forget(fd) before it closes fd (a
// descriptor number is reused by the next socket opened).
class SocketDeadlines {
 public:
  // Deadlines are times of `clock` (not owned; outlives this), which the
  // thread's checks read.
  explicit SocketDeadlines(absl::Duration check_interval,
                           platform::Clock& clock = platform::Clock::Real());
  // Stops and joins the thread.
  ~SocketDeadlines();

  SocketDeadlines(const SocketDeadlines&) = delete;
  SocketDeadlines& operator=(const SocketDeadlines&) = delete;

  // Sets or moves the deadline of `fd`.
  void Set(int fd, absl::Time deadline);
  // Set(fd, `timeout` from now on the clock).
  void SetAfter(int fd, absl::Duration timeout) {
    Set(fd, clock_.Now() + timeout);
  }
  // `fd` has no deadline any more.
  void Forget(int fd);

 private:
  void Run();

  const absl::Duration check_interval_;
  platform::Clock& clock_;
  absl::Mutex mutex_;
  std::map<int, absl::Time> deadlines_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // Last: started once the fields it reads exist.
  const std::unique_ptr<platform::Thread> thread_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_SOCKET_DEADLINES_H_
