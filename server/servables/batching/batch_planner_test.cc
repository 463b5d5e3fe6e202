#include "server/servables/batching/batch_planner.h"

#include <deque>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;

// A queue of requests of `sizes` items, all with `key` unless `keys` says.
std::deque<QueuedPtr> Queue(const std::vector<int64_t>& sizes,
                            const std::vector<std::string>& keys = {}) {
  std::deque<QueuedPtr> queue;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto queued = std::make_unique<QueuedRequest>();
    queued->batch_size = sizes[i];
    queued->batch_key = keys.empty() ? "k" : keys[i];
    queue.push_back(std::move(queued));
  }
  return queue;
}

BatchPlanner Joining(int64_t max_batch_size,
                     std::vector<int64_t> preferred = {}) {
  BatchPlanner::Options options;
  options.max_batch_size = max_batch_size;
  options.joins = true;
  options.preferred_batch_sizes = std::move(preferred);
  return BatchPlanner(options);
}

TEST(BatchPlannerTest, WithoutJoiningTheOldestRunsAloneAtOnce) {
  BatchPlanner::Options options;
  options.max_batch_size = 8;
  const BatchPlan plan = BatchPlanner(options).Plan(Queue({1, 1, 1}));
  EXPECT_THAT(plan.indices, ElementsAre(0));
  EXPECT_TRUE(plan.ready);
}

TEST(BatchPlannerTest, JoinsEqualKeysAndIsReadyWhenFull) {
  const BatchPlan plan =
      Joining(4).Plan(Queue({1, 2, 1, 1}, {"k", "k", "other", "k"}));
  EXPECT_THAT(plan.indices, ElementsAre(0, 1, 3));  // "other" never joins.
  EXPECT_EQ(plan.items, 4);
  EXPECT_TRUE(plan.ready);
}

TEST(BatchPlannerTest, PassesOverARequestThatWouldOverflow) {
  const BatchPlan plan = Joining(4).Plan(Queue({2, 3, 2}));
  EXPECT_THAT(plan.indices, ElementsAre(0, 2));
  EXPECT_TRUE(plan.ready);
}

TEST(BatchPlannerTest, WaitsWhenNeitherFullNorPreferred) {
  const BatchPlan plan = Joining(8).Plan(Queue({1, 1, 1}));
  EXPECT_EQ(plan.items, 3);
  EXPECT_FALSE(plan.ready);
}

TEST(BatchPlannerTest, RunsTheLargestPreferredSizeFormed) {
  const BatchPlan plan = Joining(8, {2, 4}).Plan(Queue({1, 1, 1, 1, 1}));
  EXPECT_THAT(plan.indices, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(plan.items, 4);
  EXPECT_TRUE(plan.ready);
}

TEST(BatchPlannerTest, OptionsFromConfigKeepOnlyUsablePreferredSizes) {
  inference::ModelConfig config;
  config.set_max_batch_size(8);
  EXPECT_FALSE(BatchPlanner::OptionsFromConfig(config).joins);
  auto* batching = config.mutable_dynamic_batching();
  batching->add_preferred_batch_size(0);
  batching->add_preferred_batch_size(4);
  batching->add_preferred_batch_size(16);
  batching->set_max_queue_delay_microseconds(250);
  const BatchPlanner::Options options = BatchPlanner::OptionsFromConfig(config);
  EXPECT_TRUE(options.joins);
  EXPECT_THAT(options.preferred_batch_sizes, ElementsAre(4));
  EXPECT_EQ(options.max_queue_delay, absl::Microseconds(250));
  config.set_max_batch_size(1);  // Nothing to join with one item.
  EXPECT_FALSE(BatchPlanner::OptionsFromConfig(config).joins);
}

TEST(BatchPlannerTest, FlushTimeIsTheOldestsEnqueuePlusTheDelay) {
  BatchPlanner::Options options;
  options.max_queue_delay = absl::Milliseconds(3);
  QueuedRequest oldest;
  oldest.enqueue_time = absl::FromUnixSeconds(100);
  EXPECT_EQ(BatchPlanner(options).FlushTime(oldest),
            absl::FromUnixSeconds(100) + absl::Milliseconds(3));
}

}  // namespace
}  // namespace castserve
