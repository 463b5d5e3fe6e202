// LifecycleMetrics: load durations and evictions by model name, recorded by
// the ModelManager and exported by ServingMetrics. It outlives the models: an
// evicted model's count must survive its unload.
#ifndef CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_
#define CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace castserve {

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

}  // namespace castserve

#endif  // CASTSERVE_SERVER_METRICS_LIFECYCLE_METRICS_H_
