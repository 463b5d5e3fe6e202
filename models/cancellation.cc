#include "models/cancellation.h"

namespace castserve::models {

void Cancellation::Cancel(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  reason_ = std::string(reason);
  cancelled_.store(true, std::memory_order_release);
}

std::string Cancellation::reason() const {
  if (cancelled_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&mu_);
    return reason_;
  }
  return parent_ != nullptr ? parent_->reason() : std::string();
}

}  // namespace castserve::models
