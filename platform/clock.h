// Time as a seam (LevelDB's Env::NowMicros in spirit): code that reads the
// time to set or test a deadline, a timeout or an idle timer, or that waits
// for a condition until one passes, does so through a Clock, so that its tests
// drive time by hand (test_util/fake_clock.h) instead of sleeping.
#ifndef CASTSERVE_PLATFORM_CLOCK_H_
#define CASTSERVE_PLATFORM_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace castserve::platform {

// Thread-safe: every method may be called concurrently from any thread.
class Clock {
 public:
  // The process's real clock (absl::Now, the mutex's own timed waits);
  // never destroyed.
  static Clock& Real();

  virtual ~Clock() = default;

  virtual absl::Time Now() = 0;

  // With `*mu` held (as absl::Mutex::AwaitWithDeadline): blocks until
  // `condition` holds or Now() >= `deadline`, and returns whether
  // `condition` holds. `*mu` is held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex* mu,
                                 const absl::Condition& condition,
                                 absl::Time deadline) = 0;

  // With `*mu` held (as absl::CondVar::WaitWithDeadline): waits for a signal
  // on `*cv` or for Now() >= `deadline`; returns true when the deadline has
  // passed. May return early without either (a spurious wakeup): callers
  // re-check their condition in a loop.
  virtual bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                                absl::Time deadline) = 0;
};

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_CLOCK_H_
