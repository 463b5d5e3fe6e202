#include "server/metrics/lifecycle_metrics.h"

namespace castserve {
namespace {

// castserve_wake_seconds's buckets: from a warm model's few milliseconds to
// a cool 1B model read back from disk.
const std::vector<double>& WakeBuckets() {
  static const auto* const buckets = new std::vector<double>{
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *buckets;
}

}  // namespace

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

void LifecycleMetrics::SetTier(const std::string& model,
                               casting::WeightTier tier) {
  absl::MutexLock lock(&mu_);
  entries_[model].tier = static_cast<int>(tier);
}

void LifecycleMetrics::RecordTierMove(const std::string& model,
                                      casting::WeightTier from,
                                      casting::WeightTier to,
                                      const std::string& cause) {
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[model];
  entry.tier = static_cast<int>(to);
  ++entry.tier_moves[{std::string(casting::WeightTierName(from)),
                      std::string(casting::WeightTierName(to)), cause}];
}

void LifecycleMetrics::RecordWake(casting::WeightTier tier,
                                  absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  const std::string name(casting::WeightTierName(tier));
  auto it = wake_seconds_.find(name);
  if (it == wake_seconds_.end()) {
    it = wake_seconds_.emplace(name, BucketCounts(&WakeBuckets())).first;
  }
  it->second.Observe(absl::ToDoubleSeconds(duration));
}

void LifecycleMetrics::SetWakeRate(const std::string& model,
                                   casting::WeightTier from,
                                   double bytes_per_second) {
  absl::MutexLock lock(&mu_);
  entries_[model].wake_rates[std::string(casting::WeightTierName(from))] =
      bytes_per_second;
}

std::map<std::string, BucketCounts> LifecycleMetrics::wake_seconds() const {
  absl::MutexLock lock(&mu_);
  return wake_seconds_;
}

std::map<std::string, LifecycleMetrics::Entry> LifecycleMetrics::snapshot()
    const {
  absl::MutexLock lock(&mu_);
  return entries_;
}

}  // namespace castserve
