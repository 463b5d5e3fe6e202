#include "server/lifecycle/model_statistics_recorder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

TEST(BucketCountsTest, CountsEachValueInTheFirstBucketAtOrAboveIt) {
  const std::vector<double> bounds = {1, 10};
  BucketCounts counts(&bounds);
  counts.Observe(0.5);
  counts.Observe(1);
  counts.Observe(7);
  counts.Observe(11);
  EXPECT_THAT(counts.counts(), ::testing::ElementsAre(2, 1, 1));
  EXPECT_EQ(counts.count(), 4u);
  EXPECT_DOUBLE_EQ(counts.sum(), 19.5);
}

TEST(ModelStatisticsRecorderTest, OneRecordFeedsCountersCodesAndHistograms) {
  ModelStatisticsRecorder recorder;
  const absl::Time now = absl::FromUnixMillis(123456);
  recorder.RecordRequest({absl::StatusCode::kOk, 3, absl::Milliseconds(2),
                          absl::Milliseconds(3), absl::Milliseconds(5)},
                         now);
  recorder.RecordRequest(
      {absl::StatusCode::kInvalidArgument, 0, absl::ZeroDuration(),
       absl::ZeroDuration(), absl::Milliseconds(1)},
      now + absl::Seconds(1));
  recorder.RecordBatch(3, absl::Milliseconds(3), 1 << 20);
  const ServedModelStatistics stats = recorder.snapshot();
  // What the ModelStatistics RPC reads.
  EXPECT_EQ(stats.success_count, 1u);
  EXPECT_EQ(stats.fail_count, 1u);
  EXPECT_EQ(stats.inference_count, 3u);
  EXPECT_EQ(stats.execution_count, 1u);
  EXPECT_EQ(stats.success_duration, absl::Milliseconds(5));
  EXPECT_EQ(stats.fail_duration, absl::Milliseconds(1));
  EXPECT_EQ(stats.queue_duration, absl::Milliseconds(2));
  EXPECT_EQ(stats.batches.at(3).first, 1u);
  EXPECT_EQ(stats.last_inference_ms, 123456u);  // Of the last success.
  // What the Prometheus collector reads, from the same records.
  EXPECT_EQ(stats.requests_by_code[0], stats.success_count);
  EXPECT_EQ(stats.requests_by_code[static_cast<int>(
                absl::StatusCode::kInvalidArgument)],
            1u);
  EXPECT_EQ(stats.request_seconds.count(), 2u);
  EXPECT_NEAR(stats.request_seconds.sum(), 0.006, 1e-9);
  // A request that never ran has no compute time to report.
  EXPECT_EQ(stats.compute_seconds.count(), 1u);
  EXPECT_DOUBLE_EQ(stats.batch_size.sum(), 3);
  EXPECT_DOUBLE_EQ(stats.batch_peak_bytes.sum(), 1 << 20);
}

}  // namespace
}  // namespace castserve
