// ModelStatisticsRecorder: the one record of a served model's completed
// requests and executed batches. The ModelStatistics RPC (counters and
// durations) and the Prometheus collector (codes and histograms) both read
// its snapshot, so the two can never disagree.
#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_STATISTICS_RECORDER_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_STATISTICS_RECORDER_H_

#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace castserve {

// Fixed-bucket histogram data: counts per bucket (not cumulative), the last
// bucket is +Inf. A value type; not thread-safe (the recorder guards it).
class BucketCounts {
 public:
  // No buckets but +Inf.
  BucketCounts();
  // `upper_bounds` ascending, without +Inf; must outlive the object.
  explicit BucketCounts(const std::vector<double>* upper_bounds);
  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return *upper_bounds_; }
  // upper_bounds().size() + 1 entries.
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  const std::vector<double>* upper_bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Request counts indexed by absl::StatusCode (OK included).
inline constexpr int kStatusCodeCount = 17;
using CountsByCode = std::array<uint64_t, kStatusCodeCount>;

// Cumulative, since the model was loaded. Durations are what Triton's
// statistics call queue and compute_infer.
struct ServedModelStatistics {
  uint64_t inference_count = 0;  // Items (batch elements) inferred.
  uint64_t execution_count = 0;  // Forwards run (batches).
  uint64_t success_count = 0;
  absl::Duration success_duration;
  uint64_t fail_count = 0;
  absl::Duration fail_duration;
  absl::Duration queue_duration;
  absl::Duration compute_duration;
  // Executed batch size -> (count, compute duration).
  std::map<int64_t, std::pair<uint64_t, absl::Duration>> batches;
  // Milliseconds since the epoch of the last inference; 0 if none.
  uint64_t last_inference_ms = 0;

  // Every request by status code; [kOk] == success_count.
  CountsByCode requests_by_code{};
  // Histograms (seconds; items; bytes).
  BucketCounts queue_seconds;
  BucketCounts compute_seconds;  // Per request: its batch's forward.
  BucketCounts request_seconds;  // Enqueue to completion.
  BucketCounts batch_size;       // Items per executed batch.
  BucketCounts batch_peak_bytes;

  // Generation models only (zeros for the others): time from the request's
  // arrival to its first generated token (milliseconds, as Triton's
  // first-response histogram), time between a sequence's tokens (seconds),
  // and the tokens generated.
  BucketCounts first_response_ms;
  BucketCounts inter_token_seconds;
  uint64_t generated_tokens = 0;
};

// One completed request, successful or not. A request refused before it
// was queued has zero durations and items.
struct CompletedRequest {
  absl::StatusCode code = absl::StatusCode::kOk;
  int64_t items = 0;
  absl::Duration queue;
  absl::Duration compute;  // Zero for a request that never ran.
  absl::Duration total;    // Enqueue to completion.
};

// Thread-safe; one mutex, no allocation per record beyond a new batch size.
class ModelStatisticsRecorder {
 public:
  ModelStatisticsRecorder();

  // `now` is when the request completed (for last_inference_ms).
  void RecordRequest(const CompletedRequest& request, absl::Time now);
  // One executed forward of `items` items, its compute time, and the peak
  // increase of the tracking allocator's live bytes during it.
  void RecordBatch(int64_t items, absl::Duration compute,
                   int64_t peak_increase_bytes);

  // A generation model's token: the first of its sequence `after` the
  // request arrived, or a later one `after` the one before it.
  void RecordFirstToken(absl::Duration after);
  void RecordNextToken(absl::Duration after);

  ServedModelStatistics snapshot() const;

 private:
  mutable absl::Mutex mu_;
  ServedModelStatistics data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_STATISTICS_RECORDER_H_
