// LifecycleMetrics: load durations, evictions, memory tiers and their moves
// by model name, and wake latencies by tier, recorded by
// the ModelManager and exported by ServingMetrics. It outlives the models: an
// evicted model's count must survive its unload.
#ifndef CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_
#define CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "casting/memory/weight_tier.h"
#include "server/lifecycle/model_statistics_recorder.h"

namespace castserve {

// Load durations and evictions by model name. Thread-safe. Names are the
// repository's models, so the label set is bounded.
class LifecycleMetrics {
 public:
  // The process's instance, which the ModelManager records into.
  static LifecycleMetrics& Global();

  void RecordLoad(const std::string& model, absl::Duration duration);
  void RecordEviction(const std::string& model);
  // The model is READY in `tier` (a load makes it hot).
  void SetTier(const std::string& model, casting::WeightTier tier);
  // The model moved between tiers; `cause` is "pressure", "keep_alive",
  // "api" or "request" (a promotion).
  void RecordTierMove(const std::string& model, casting::WeightTier from,
                      casting::WeightTier to, const std::string& cause);
  // A request found its model in `tier` (below hot) and waited `duration`
  // for it to be ready to run.
  void RecordWake(casting::WeightTier tier, absl::Duration duration);
  // The model's promotions from `from` build it back at `bytes_per_second`
  // (the ModelManager's WakeRates, after each timed promotion).
  void SetWakeRate(const std::string& model, casting::WeightTier from,
                   double bytes_per_second);

  struct Entry {
    double last_load_seconds = 0;
    bool loaded = false;
    uint64_t evictions = 0;
    // 0 hot, 1 warm, 2 cool (castserve_model_tier), while loaded.
    int tier = 0;
    // (from, to, cause) -> moves.
    std::map<std::tuple<std::string, std::string, std::string>, uint64_t>
        tier_moves;
    // The tier promotions started from ("warm", "cool") -> bytes per second.
    std::map<std::string, double> wake_rates;
  };
  std::map<std::string, Entry> snapshot() const;
  // By the tier the request found ("warm", "cool"), in seconds.
  std::map<std::string, BucketCounts> wake_seconds() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, BucketCounts> wake_seconds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_
