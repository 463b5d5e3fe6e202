// Cancellation: a flag that long operations (a forward, a load's warmups)
// poll between their steps, so that unloading a model that is still loading,
// or a shutdown whose grace period ended, stops them within one step.
//
// A forward polls it at every module boundary (ModuleCall): a running
// module's kernels finish, the next module does not start. Cancellations
// form a tree: a child is cancelled when it or any ancestor is (the model
// manager's root is cancelled at shutdown; each load has a child).
//
// Thread-safe. Cancel is final: a cancelled flag is never cleared.
#ifndef CASTSERVE_MODELS_CANCELLATION_H_
#define CASTSERVE_MODELS_CANCELLATION_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace castserve::models {

class Cancellation {
 public:
  Cancellation() = default;
  explicit Cancellation(std::shared_ptr<const Cancellation> parent)
      : parent_(std::move(parent)) {}
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Cancels this flag and its descendants. The first reason is kept.
  void Cancel(absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  bool cancelled() const {
    return cancelled_.load(std::memory_order_acquire) ||
           (parent_ != nullptr && parent_->cancelled());
  }
  // Why: this flag's reason, else the nearest cancelled ancestor's; empty
  // while not cancelled.
  std::string reason() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::shared_ptr<const Cancellation> parent_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_CANCELLATION_H_
