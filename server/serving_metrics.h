// Serving and memory metrics of the loaded models, for the metrics port:
//
// - ModelMetrics: what the serving path records per request and per batch
//   (failures by reason, duration, batch size and batch peak-memory
//   histograms). One per served model; thread-safe, one mutex, no allocation
//   per record.
// - LifecycleMetrics: load durations and evictions by model name; outlives
//   the models (an evicted model's count must survive its unload).
// - ServingMetrics: the prometheus::Collectable. At scrape time it reads the
//   model states, the READY models (footprint, statistics, pending requests,
//   the tracking allocator's per-model live and peak bytes) and the tracking
//   allocator's process-wide counters. The README's "Metrics reference" lists
//   every family it exports.
#ifndef CASTSERVE_SERVER_SERVING_METRICS_H_
#define CASTSERVE_SERVER_SERVING_METRICS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "casting/memory_stats.h"
#include "casting/weight.h"
#include "models/casting_hooks.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/served_model.h"

namespace castserve {

// Fixed-bucket histogram data: counts per bucket (not cumulative), the last
// bucket is +Inf. A value type; not thread-safe (ModelMetrics guards it).
class BucketCounts {
 public:
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

// Per-model recorder for the serving path. Thread-safe.
// Request counts indexed by absl::StatusCode (OK included).
inline constexpr int kStatusCodeCount = 17;
using CountsByCode = std::array<uint64_t, kStatusCodeCount>;

class ModelMetrics {
 public:
  struct Snapshot {
    // Indexed by absl::StatusCode; [kOk] counts successes.
    CountsByCode requests_by_code{};
    BucketCounts queue_seconds;
    BucketCounts compute_seconds;  // Per request: its batch's forward.
    BucketCounts request_seconds;  // Enqueue to completion.
    BucketCounts batch_size;       // Items per executed batch.
    BucketCounts batch_peak_bytes;
  };

  ModelMetrics();

  // One completed request (successful or not). Durations of requests that
  // never ran are zero for compute.
  void RecordRequest(absl::StatusCode code, absl::Duration queue,
                     absl::Duration compute, absl::Duration total);
  // One executed forward of `items` items whose allocations raised the
  // tracking allocator's live bytes by at most `peak_increase_bytes`.
  void RecordBatch(int64_t items, int64_t peak_increase_bytes);

  Snapshot snapshot() const;

 private:
  mutable absl::Mutex mu_;
  Snapshot data_ ABSL_GUARDED_BY(mu_);
};

// What a ServedModel exposes for metrics beyond the ServedModel interface;
// the collectable finds it with dynamic_cast. Thread-safe.
class ModelMetricsSource {
 public:
  virtual ~ModelMetricsSource() = default;
  virtual const ModelMetrics& serving_metrics() const = 0;
  // The tracking allocator's peak for the model since it was loaded; 0
  // without a tracking allocator.
  virtual int64_t peak_tracked_bytes() const = 0;
  // The materializations of the model's weights since it was loaded.
  virtual casting::WeightActivity weight_activity() const = 0;
  // How the prefetches of its forwards turned out since it was loaded.
  virtual models::PrefetchCounts prefetch_counts() const = 0;
};

// Load durations and evictions by model name. Thread-safe. Names are the
// repository's models, so the label set is bounded.
class LifecycleMetrics {
 public:
  // The process's instance, which the ModelManager records into.
  static LifecycleMetrics& Global();

  void RecordLoad(const std::string& model, absl::Duration duration);
  void RecordEviction(const std::string& model);

  struct Entry {
    double last_load_seconds = 0;
    bool loaded = false;
    uint64_t evictions = 0;
  };
  std::map<std::string, Entry> snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Inference requests refused before any model took them (unknown or
// unavailable model, a malformed parameter), by status code. Exported as
// castserve_request_failure_total without model and version labels, so
// that the family counts every failed request. Thread-safe.
class UnroutedRequests {
 public:
  // The process's instance, which the inference service records into.
  static UnroutedRequests& Global();

  void Record(absl::StatusCode code);
  CountsByCode snapshot() const;

 private:
  mutable absl::Mutex mu_;
  CountsByCode by_code_ ABSL_GUARDED_BY(mu_){};
};

// One model of the repository and its lifecycle state: "UNAVAILABLE",
// "LOADING", "READY" or "UNLOADING" (ModelStateName's strings).
struct ModelStateSample {
  std::string name;
  std::string version;
  std::string state;
};

struct ServingMetricsOptions {
  // Every model of the repository (ModelManager::Index).
  std::function<std::vector<ModelStateSample>()> model_states;
  // The READY models by name (ModelManager::ReadyModels).
  std::function<
      std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>()>
      ready_models;
  // Not owned; null exports no lifecycle families.
  const LifecycleMetrics* lifecycle = &LifecycleMetrics::Global();
  // Not owned; null exports no unrouted failures.
  const UnroutedRequests* unrouted = &UnroutedRequests::Global();
  // The devices whose memory is exported, labelled with their DeviceName()
  // (not owned): the CPU tracking allocator, and CUDA devices' caching
  // allocators when LibTorch has CUDA (casting/cuda_memory_stats.h). Empty
  // exports no device families.
  std::vector<const casting::DeviceMemoryStats*> devices;
  // --memory-budget-bytes, exported as castserve_memory_budget_bytes (0 = no
  // budget) so that alerts and dashboards can compare usage with it.
  int64_t memory_budget_bytes = 0;
};

// Thread-safe: Collect only calls the thread-safe functions above.
class ServingMetrics : public prometheus::Collectable {
 public:
  explicit ServingMetrics(ServingMetricsOptions options);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ServingMetricsOptions options_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVING_METRICS_H_
