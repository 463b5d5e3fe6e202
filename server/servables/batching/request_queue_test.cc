#include "server/servables/batching/request_queue.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"

namespace castserve {
namespace {

// A queue entry without tensors (the queue never looks at them).
QueuedPtr Entry(int64_t items = 1) {
  auto queued = std::make_unique<QueuedRequest>();
  queued->batch_size = items;
  return queued;
}

BatchPlanner Alone() { return BatchPlanner(BatchPlanner::Options()); }

TEST(RequestQueueTest, RefusesBeyondItsSizeAndAfterStop) {
  RequestQueue::Options options;
  options.model_name = "m";
  options.max_queue_size = 2;
  RequestQueue queue(options);
  for (int i = 0; i < 2; ++i) {
    QueuedPtr entry = Entry();
    ASSERT_TRUE(queue.Push(entry).ok());
    EXPECT_EQ(entry, nullptr);  // Taken.
  }
  QueuedPtr third = Entry();
  absl::Status refused = queue.Push(third);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(), "the queue of model m is full (2 requests)");
  EXPECT_NE(third, nullptr);  // Still the caller's.
  EXPECT_EQ(queue.pending_requests(), 2);

  std::vector<Rejection> drained = queue.Stop();
  ASSERT_EQ(drained.size(), 2u);
  EXPECT_EQ(drained[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue.Push(third).code(), absl::StatusCode::kUnavailable);
  std::vector<QueuedPtr> batch;
  std::vector<Rejection> dropped;
  EXPECT_FALSE(queue.NextBatch(Alone(), &batch, &dropped));
}

TEST(RequestQueueTest, TakesBatchesAsPlannedAndCountsThemRunning) {
  RequestQueue queue{RequestQueue::Options()};
  for (int i = 0; i < 2; ++i) {
    QueuedPtr entry = Entry();
    ASSERT_TRUE(queue.Push(entry).ok());
  }
  std::vector<QueuedPtr> batch;
  std::vector<Rejection> dropped;
  ASSERT_TRUE(queue.NextBatch(Alone(), &batch, &dropped));
  EXPECT_EQ(batch.size(), 1u);  // Alone: no joining.
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(queue.pending_requests(), 2);  // One queued, one running.
  queue.FinishRunning();
  EXPECT_EQ(queue.pending_requests(), 1);
}

// Polls WaitForExpired, as the reaper does, until something is dropped.
std::vector<Rejection> WaitForDropped(RequestQueue& queue) {
  std::vector<Rejection> dropped;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (dropped.empty() && absl::Now() < give_up) {
    EXPECT_TRUE(queue.WaitForExpired(&dropped));
  }
  return dropped;
}

TEST(RequestQueueTest, ExpiresAtTheQueueTimeoutOrTheDeadline) {
  // Time is the fake clock's: the test moves it instead of sleeping, and the
  // reaper's poll (WaitForExpired) checks at once.
  platform::test_util::FakeClock clock;
  RequestQueue::Options options;
  options.queue_timeout = absl::Milliseconds(20);
  options.cancellation_poll_interval = absl::ZeroDuration();
  options.clock = &clock;
  RequestQueue queue(options);
  QueuedPtr by_timeout = Entry();
  const absl::Time start = clock.Now();
  ASSERT_TRUE(queue.Push(by_timeout).ok());
  clock.Advance(absl::Milliseconds(19));
  std::vector<Rejection> dropped;
  ASSERT_TRUE(queue.WaitForExpired(&dropped));
  EXPECT_TRUE(dropped.empty());  // 1 ms before the queue timeout.
  clock.Advance(absl::Milliseconds(1));
  dropped = WaitForDropped(queue);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(dropped[0].status.message(),
            "the request's queue timeout passed while it was queued");
  EXPECT_GE(clock.Now() - start, absl::Milliseconds(20));

  QueuedPtr by_deadline = Entry();
  by_deadline->deadline = clock.Now() + absl::Milliseconds(5);
  ASSERT_TRUE(queue.Push(by_deadline).ok());
  clock.Advance(absl::Milliseconds(5));
  dropped = WaitForDropped(queue);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status.message(),
            "the request's deadline passed while it was queued");
  EXPECT_EQ(queue.pending_requests(), 0);
}

TEST(RequestQueueTest, DropsACancelledRequestWithinAPollInterval) {
  RequestQueue queue{RequestQueue::Options()};
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  QueuedPtr kept = Entry();
  QueuedPtr waiting = Entry();
  waiting->is_cancelled = [cancelled] { return cancelled->load(); };
  ASSERT_TRUE(queue.Push(kept).ok());
  ASSERT_TRUE(queue.Push(waiting).ok());
  std::vector<Rejection> dropped;
  ASSERT_TRUE(queue.WaitForExpired(&dropped));
  EXPECT_TRUE(dropped.empty());  // Nothing cancelled yet.
  *cancelled = true;
  const absl::Time start = absl::Now();
  dropped = WaitForDropped(queue);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(queue.pending_requests(), 1);  // The other one stays.
}

}  // namespace
}  // namespace castserve
