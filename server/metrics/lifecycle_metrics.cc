#include "server/metrics/lifecycle_metrics.h"

namespace castserve {

LifecycleMetrics& LifecycleMetrics::Global() {
  static auto* const global = new LifecycleMetrics;
  return *global;
}

void LifecycleMetrics::RecordLoad(const std::string& model,
                                  absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[model];
  entry.last_load_seconds = absl::ToDoubleSeconds(duration);
  entry.loaded = true;
}

void LifecycleMetrics::RecordEviction(const std::string& model) {
  absl::MutexLock lock(&mu_);
  ++entries_[model].evictions;
}

std::map<std::string, LifecycleMetrics::Entry> LifecycleMetrics::snapshot()
    const {
  absl::MutexLock lock(&mu_);
  return entries_;
}

}  // namespace castserve
