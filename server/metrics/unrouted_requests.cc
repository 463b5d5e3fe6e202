#include "server/metrics/unrouted_requests.h"

namespace castserve {

UnroutedRequests& UnroutedRequests::Global() {
  static auto* const global = new UnroutedRequests;
  return *global;
}

void UnroutedRequests::Record(absl::StatusCode code) {
  const int index = static_cast<int>(code);
  if (index < 0 || index >= static_cast<int>(by_code_.size())) return;
  absl::MutexLock lock(&mu_);
  ++by_code_[index];
}

CountsByCode UnroutedRequests::snapshot() const {
  absl::MutexLock lock(&mu_);
  return by_code_;
}

}  // namespace castserve
