#include "platform/test_util/fake_clock.h"

#include "absl/base/internal/raw_logging.h"

namespace castserve::platform::test_util {

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration duration) {
  ABSL_RAW_CHECK(duration >= absl::ZeroDuration(), "time runs forwards");
  absl::MutexLock lock(&mu_);
  now_ += duration;
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu,
                                  const absl::Condition& condition,
                                  absl::Time deadline) {
  for (;;) {
    if (condition.Eval()) return true;
    if (Now() >= deadline) return false;
    mu->AwaitWithTimeout(condition, kRecheckInterval);
  }
}

bool FakeClock::WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                                 absl::Time deadline) {
  if (Now() >= deadline) return true;
  cv->WaitWithTimeout(mu, kRecheckInterval);
  return Now() >= deadline;
}

}  // namespace castserve::platform::test_util
