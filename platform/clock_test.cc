#include "platform/clock.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"

namespace castserve::platform {
namespace {

TEST(ClockTest, RealClockReadsTheWallClock) {
  const absl::Time before = absl::Now();
  const absl::Time now = Clock::Real().Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
}

TEST(ClockTest, RealAwaitReturnsTheConditionOrTimesOut) {
  absl::Mutex mu;
  bool flag = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(Clock::Real().AwaitWithDeadline(&mu, absl::Condition(&flag),
                                              absl::InfiniteFuture()));
  flag = false;
  EXPECT_FALSE(Clock::Real().AwaitWithDeadline(&mu, absl::Condition(&flag),
                                               absl::InfinitePast()));
}

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  test_util::FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(3));
}

TEST(FakeClockTest, AWaiterWakesWhenTheFakeDeadlinePasses) {
  test_util::FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Hours(1);
  absl::Mutex mu;
  bool never = false;
  absl::Notification waiting;
  absl::Notification done;
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    waiting.Notify();
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&never), deadline);
    done.Notify();
  });
  waiting.WaitForNotification();
  clock.Advance(absl::Minutes(59));
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  clock.Advance(absl::Minutes(1));
  waiter.join();
  EXPECT_FALSE(result);  // Timed out, in fake time.
}

TEST(FakeClockTest, AWaiterReturnsAsSoonAsTheConditionHolds) {
  test_util::FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    flag = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag),
                                        absl::InfiniteFuture()));
  }
  setter.join();
}

TEST(FakeClockTest, CondVarWaitReportsTheFakeDeadline) {
  test_util::FakeClock clock;
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.WaitWithDeadline(&cv, &mu, clock.Now() + absl::Hours(1)));
  EXPECT_TRUE(clock.WaitWithDeadline(&cv, &mu, clock.Now()));
}

}  // namespace
}  // namespace castserve::platform
