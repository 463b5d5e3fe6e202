#include "server/lifecycle/model_statistics_recorder.h"

#include <algorithm>

namespace castserve {
namespace {

// Latencies from 100 us to 60 s.
const std::vector<double>& DurationBuckets() {
  static const auto* const buckets = new std::vector<double>{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return *buckets;
}

// Latencies from 1 ms to 60 s, in milliseconds.
const std::vector<double>& MillisecondBuckets() {
  static const auto* const buckets =
      new std::vector<double>{1,   2.5,  5,    10,   25,    50,    100,  250,
                              500, 1000, 2500, 5000, 10000, 30000, 60000};
  return *buckets;
}

const std::vector<double>& BatchSizeBuckets() {
  static const auto* const buckets =
      new std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return *buckets;
}

// 64 KiB to 64 GiB, by factors of 4.
const std::vector<double>& PeakBytesBuckets() {
  static const auto* const buckets = [] {
    auto* bounds = new std::vector<double>;
    for (double bound = 65536; bound <= 68719476736.0; bound *= 4) {
      bounds->push_back(bound);
    }
    return bounds;
  }();
  return *buckets;
}

const std::vector<double>& NoBuckets() {
  static const auto* const buckets = new std::vector<double>;
  return *buckets;
}

}  // namespace

BucketCounts::BucketCounts() : BucketCounts(&NoBuckets()) {}

BucketCounts::BucketCounts(const std::vector<double>* upper_bounds)
    : upper_bounds_(upper_bounds), counts_(upper_bounds->size() + 1, 0) {}

void BucketCounts::Observe(double value) {
  const auto it =
      std::lower_bound(upper_bounds_->begin(), upper_bounds_->end(), value);
  ++counts_[it - upper_bounds_->begin()];
  ++count_;
  sum_ += value;
}

ModelStatisticsRecorder::ModelStatisticsRecorder() {
  data_.queue_seconds = BucketCounts(&DurationBuckets());
  data_.compute_seconds = BucketCounts(&DurationBuckets());
  data_.request_seconds = BucketCounts(&DurationBuckets());
  data_.batch_size = BucketCounts(&BatchSizeBuckets());
  data_.batch_peak_bytes = BucketCounts(&PeakBytesBuckets());
  data_.first_response_ms = BucketCounts(&MillisecondBuckets());
  data_.inter_token_seconds = BucketCounts(&DurationBuckets());
}

void ModelStatisticsRecorder::RecordFirstToken(absl::Duration after) {
  absl::MutexLock lock(&mu_);
  data_.first_response_ms.Observe(absl::ToDoubleMilliseconds(after));
  ++data_.generated_tokens;
}

void ModelStatisticsRecorder::RecordNextToken(absl::Duration after) {
  absl::MutexLock lock(&mu_);
  data_.inter_token_seconds.Observe(absl::ToDoubleSeconds(after));
  ++data_.generated_tokens;
}

void ModelStatisticsRecorder::RecordRequest(const CompletedRequest& request,
                                            absl::Time now) {
  const int index = static_cast<int>(request.code);
  absl::MutexLock lock(&mu_);
  ++data_.requests_by_code[index >= 0 && index < kStatusCodeCount
                               ? index
                               : static_cast<int>(absl::StatusCode::kUnknown)];
  data_.queue_seconds.Observe(absl::ToDoubleSeconds(request.queue));
  data_.request_seconds.Observe(absl::ToDoubleSeconds(request.total));
  if (request.compute > absl::ZeroDuration()) {
    data_.compute_seconds.Observe(absl::ToDoubleSeconds(request.compute));
  }
  if (request.code == absl::StatusCode::kOk) {
    ++data_.success_count;
    data_.success_duration += request.total;
    data_.inference_count += request.items;
    data_.queue_duration += request.queue;
    data_.compute_duration += request.compute;
    data_.last_inference_ms = absl::ToUnixMillis(now);
  } else {
    ++data_.fail_count;
    data_.fail_duration += request.total;
  }
}

void ModelStatisticsRecorder::RecordBatch(int64_t items, absl::Duration compute,
                                          int64_t peak_increase_bytes) {
  absl::MutexLock lock(&mu_);
  data_.batch_size.Observe(static_cast<double>(items));
  data_.batch_peak_bytes.Observe(static_cast<double>(peak_increase_bytes));
  ++data_.execution_count;
  auto& [count, duration] = data_.batches[items];
  ++count;
  duration += compute;
}

ServedModelStatistics ModelStatisticsRecorder::snapshot() const {
  absl::MutexLock lock(&mu_);
  return data_;
}

}  // namespace castserve
