// A ServedModelFactory whose models only hold bytes, for tests of the
// ModelManager's lifecycle and memory budget: no checkpoints, no LibTorch.
//
// A model's config says what it is, in string parameters:
//   "bytes": what it holds once it serves, and its projection (default 100);
//   "grow":  present: it holds nothing until its first request, then "bytes"
//            (a lazily loaded model that fills up on first use);
//   "fail":  present: Create fails FAILED_PRECONDITION with the value;
//   "warm_bytes", "cool_bytes": what it holds warm and cool (default: its
//            "bytes", a tier that frees nothing), its ProjectedTierBytes;
//   "promotion_ms": present: each move up reports a promotion that took
//            this long (last_promotion).
// A model moved down (MoveTo) holds its tier's bytes at once; moved up it
// is only marked, and holds "bytes" again from its next request, as a real
// model builds back on its next forward.
// Every live model's bytes are summed in the factory's HeldBytes, sampled at
// each change, so a test sees the most that was ever held at once.
//
// Thread-safe.
#ifndef CASTSERVE_SERVER_TEST_UTIL_SIZED_MODEL_FACTORY_H_
#define CASTSERVE_SERVER_TEST_UTIL_SIZED_MODEL_FACTORY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/served_model.h"

namespace castserve::testing {

// The bytes all live SizedServedModels of one factory hold, and the most
// they held at once.
class HeldBytes {
 public:
  void Add(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t now() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t most() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  int64_t now_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t most_ ABSL_GUARDED_BY(mu_) = 0;
};

// While held, Pass blocks its callers: a factory's Creates (a slow load)
// or a model's frees after a move down (SizedServedModel::MoveTo with
// `released`, a large model's frees).
class HoldGate {
 public:
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once `count` callers wait at the gate.
  void AwaitWaiting(int count) ABSL_LOCKS_EXCLUDED(mu_);
  // True once the gate is not held; false as soon as `cancellation` (if
  // any; polled every millisecond) is cancelled.
  bool Pass(const models::Cancellation* cancellation = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

// footprint() reports its bytes resident, tracked_bytes() half of them.
// Infer counts as pending while it runs; a test may hold more pending
// requests itself (set_pending).
class SizedServedModel : public ServedModel {
 public:
  // Holds `bytes` now, or from its first request when `grow`.
  SizedServedModel(inference::ModelConfig config, TierBytes bytes, bool grow,
                   HeldBytes* held, std::atomic<int>* live, HoldGate* frees);
  ~SizedServedModel() override;

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return specs_; }
  const std::vector<TensorSpec>& outputs() const override { return specs_; }
  // Grows on the first call, then answers OK inline.
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;
  int64_t pending_requests() const override { return pending_; }
  ServedModelStatistics statistics() const override { return {}; }
  casting::Footprint footprint() const override;
  int64_t tracked_bytes() const override { return held_bytes() / 2; }
  casting::WeightTier tier() const override { return tier_; }
  // With `released`, the bytes a move down frees leave the factory's
  // HeldBytes when `*released` goes, after the factory's HoldFrees lets it.
  absl::Status MoveTo(casting::WeightTier tier,
                      std::shared_ptr<const void>* released) override
      ABSL_LOCKS_EXCLUDED(mu_);
  PromotionTiming last_promotion() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return promotion_;
  }

  void set_pending(int pending) { pending_ = pending; }
  int64_t held_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many requests ran on this model (Infer calls).
  int requests() const { return requests_; }
  // How often footprint() was read: once per measurement of the model.
  int footprint_reads() const { return footprint_reads_; }

 private:
  void Grow() ABSL_LOCKS_EXCLUDED(mu_);

  const inference::ModelConfig config_;
  const std::vector<TensorSpec> specs_;
  const TierBytes bytes_;
  mutable absl::Mutex mu_;
  // The tier whose bytes it holds (hot until moved down).
  casting::WeightTier held_tier_ ABSL_GUARDED_BY(mu_) =
      casting::WeightTier::kHot;
  PromotionTiming promotion_ ABSL_GUARDED_BY(mu_);
  std::atomic<casting::WeightTier> tier_{casting::WeightTier::kHot};
  std::atomic<int> requests_{0};
  HeldBytes* const held_;
  std::atomic<int>* const live_;
  HoldGate* const frees_;
  std::atomic<bool> grown_;
  std::atomic<int> pending_{0};
  mutable std::atomic<int> footprint_reads_{0};
};

// Makes SizedServedModels. While gated, Create blocks (polling its
// cancellation, as a real load does between steps).
class SizedModelFactory : public ServedModelFactory {
 public:
  absl::StatusOr<std::shared_ptr<ServedModel>> Create(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation) override;
  // The config's "bytes".
  absl::StatusOr<int64_t> ProjectedBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) override;
  // Its "bytes", "warm_bytes" and "cool_bytes".
  absl::StatusOr<TierBytes> ProjectedTierBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) override;

  void Gate() { creates_gate_.Hold(); }
  void Open() { creates_gate_.Release(); }
  // Returns once `count` Creates are blocked by the gate.
  void AwaitWaiting(int count) { creates_gate_.AwaitWaiting(count); }
  int creates() const { return creates_; }
  int live_models() const { return live_models_; }
  const HeldBytes& held() const { return held_; }
  // Its models' frees after moves down.
  HoldGate& frees() { return frees_; }

 private:
  HoldGate creates_gate_;
  std::atomic<int> creates_{0};
  std::atomic<int> live_models_{0};
  HeldBytes held_;
  HoldGate frees_;
};

}  // namespace castserve::testing

#endif  // CASTSERVE_SERVER_TEST_UTIL_SIZED_MODEL_FACTORY_H_
