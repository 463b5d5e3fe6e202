#include "platform/executor.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "platform/test_util/manual_executor.h"

namespace castserve::platform {
namespace {

TEST(ThreadExecutorTest, StartThreadRunsWorkThatJoinWaitsFor) {
  std::unique_ptr<Executor> executor = NewThreadExecutor();
  std::atomic<bool> ran{false};
  std::unique_ptr<Thread> thread = executor->StartThread([&] { ran = true; });
  thread->Join();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(thread->IsCurrent());
}

TEST(ThreadExecutorTest, ScheduleDoesNotBlockAndDrainWaitsForTheWork) {
  std::unique_ptr<Executor> executor = NewThreadExecutor();
  absl::Notification release;
  std::atomic<int> finished{0};
  for (int i = 0; i < 3; ++i) {
    executor->Schedule([&] {
      release.WaitForNotification();
      ++finished;
    });
  }
  EXPECT_EQ(finished, 0);  // Schedule returned while the work blocks.
  release.Notify();
  executor->Drain();
  EXPECT_EQ(finished, 3);
}

TEST(ThreadExecutorTest, DrainWaitsForWorkScheduledByWork) {
  std::unique_ptr<Executor> executor = NewThreadExecutor();
  std::atomic<bool> inner{false};
  executor->Schedule([&] {
    executor->Schedule([&] {
      absl::SleepFor(absl::Milliseconds(20));
      inner = true;
    });
  });
  executor->Drain();
  EXPECT_TRUE(inner);
}

TEST(ThreadExecutorTest, JoinLaterTakesAThreadFromItself) {
  std::unique_ptr<Executor> executor = NewThreadExecutor();
  std::unique_ptr<Thread> self;
  absl::Notification started;
  absl::Notification handed_over;
  std::atomic<bool> was_current{false};
  self = executor->StartThread([&] {
    started.WaitForNotification();
    was_current = self->IsCurrent();
    executor->JoinLater(std::move(self));
    handed_over.Notify();
  });
  started.Notify();
  handed_over.WaitForNotification();
  executor->Drain();  // Joins the thread; a detached one would outlive it.
  EXPECT_TRUE(was_current);
  EXPECT_EQ(self, nullptr);
}

TEST(ThreadExecutorTest, DestroyingTheExecutorDrainsIt) {
  std::atomic<bool> ran{false};
  {
    std::unique_ptr<Executor> executor = NewThreadExecutor();
    executor->Schedule([&] {
      absl::SleepFor(absl::Milliseconds(20));
      ran = true;
    });
  }
  EXPECT_TRUE(ran);
}

TEST(ManualExecutorTest, ScheduledWorkRunsOnlyWhenTheTestSaysSo) {
  test_util::ManualExecutor executor;
  int runs = 0;
  executor.Schedule([&] { ++runs; });
  executor.Schedule([&] { executor.Schedule([&] { ++runs; }); });
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(executor.pending(), 2);
  EXPECT_EQ(executor.RunPending(), 2);
  EXPECT_EQ(runs, 1);
  executor.Drain();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(executor.pending(), 0);
}

TEST(ManualExecutorTest, CountsTheThreadsItStarts) {
  test_util::ManualExecutor executor;
  std::atomic<int> ran{0};
  executor.StartThread([&] { ++ran; })->Join();
  executor.StartThread([&] { ++ran; })->Join();
  EXPECT_EQ(executor.threads_started(), 2);
  EXPECT_EQ(ran, 2);
}

}  // namespace
}  // namespace castserve::platform
