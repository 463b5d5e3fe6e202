// Serving and memory metrics of the loaded models, for the metrics port:
//
// - Per model, what its ModelStatisticsRecorder recorded (the same record
//   the ModelStatistics RPC reads) and its ServedModel::activity().
// - What the lifecycle and the core recorded (lifecycle_metrics.h,
//   unrouted_requests.h), which outlives the models.
// - ServingMetrics: the prometheus::Collectable. At scrape time it reads the
//   model states, the READY models (footprint, statistics, pending requests,
//   the tracking allocator's per-model live and peak bytes) and the tracking
//   allocator's process-wide counters. The README's "Metrics reference" lists
//   every family it exports.
#ifndef CASTSERVE_SERVER_METRICS_SERVING_METRICS_H_
#define CASTSERVE_SERVER_METRICS_SERVING_METRICS_H_

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
#include "casting/memory/memory_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/lifecycle/served_model.h"
#include "server/metrics/lifecycle_metrics.h"
#include "server/metrics/unrouted_requests.h"

namespace castserve {

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
  // allocators when LibTorch has CUDA (casting/memory/cuda_memory_stats.h).
  // Empty exports no device families.
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

#endif  // CASTSERVE_SERVER_METRICS_SERVING_METRICS_H_
