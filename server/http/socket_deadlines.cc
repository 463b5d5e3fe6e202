#include "server/http/socket_deadlines.h"

#include <sys/socket.h>

namespace castserve {

SocketDeadlines::SocketDeadlines(absl::Duration check_interval,
                                 platform::Clock& clock)
    : check_interval_(check_interval),
      clock_(clock),
      thread_(platform::Executor::Default().StartThread([this] { Run(); })) {}

SocketDeadlines::~SocketDeadlines() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_->Join();
}

void SocketDeadlines::Set(int fd, absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  deadlines_[fd] = deadline;
}

void SocketDeadlines::Forget(int fd) {
  absl::MutexLock lock(&mutex_);
  deadlines_.erase(fd);
}

void SocketDeadlines::Run() {
  absl::MutexLock lock(&mutex_);
  while (!clock_.AwaitWithDeadline(&mutex_, absl::Condition(&stopping_),
                                   clock_.Now() + check_interval_)) {
    const absl::Time now = clock_.Now();
    for (auto it = deadlines_.begin(); it != deadlines_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      // Under the lock: the owner cannot have closed fd (Forget first).
      shutdown(it->first, SHUT_RDWR);
      it = deadlines_.erase(it);
    }
  }
}

}  // namespace castserve
