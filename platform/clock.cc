#include "platform/clock.h"

#include "absl/time/clock.h"

namespace castserve::platform {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) override {
    return mu->AwaitWithDeadline(condition, deadline);
  }

  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                        absl::Time deadline) override {
    return cv->WaitWithDeadline(mu, deadline);
  }
};

}  // namespace

Clock& Clock::Real() {
  static RealClock* const clock = new RealClock();
  return *clock;
}

}  // namespace castserve::platform
