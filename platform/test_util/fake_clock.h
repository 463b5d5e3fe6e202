// A Clock whose time moves only when a test calls Advance, so that tests of
// deadlines, timeouts and idle timers run without sleeping and never race
// the wall clock.
#ifndef CASTSERVE_PLATFORM_TEST_UTIL_FAKE_CLOCK_H_
#define CASTSERVE_PLATFORM_TEST_UTIL_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platform/clock.h"

namespace castserve::platform::test_util {

// Thread-safe. Waits on the caller's mutex re-check the fake time every
// `kRecheckInterval` of real time (a fake advance cannot wake another
// mutex's waiters), so a waiter sees an Advance within about a millisecond.
class FakeClock final : public Clock {
 public:
  static constexpr absl::Duration kRecheckInterval = absl::Milliseconds(1);

  // Starts at `start` (a fixed, arbitrary instant by default).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'000'000'000));

  absl::Time Now() override ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the time forward by `duration` (>= 0).
  void Advance(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_);

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) override;
  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                        absl::Time deadline) override;

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::platform::test_util

#endif  // CASTSERVE_PLATFORM_TEST_UTIL_FAKE_CLOCK_H_
