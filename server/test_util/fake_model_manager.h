// In-memory ModelManager and ServedModel for tests of the gRPC edge: no
// checkpoints, no LibTorch models. Thread-safe.
#ifndef CASTSERVE_SERVER_TEST_UTIL_FAKE_MODEL_MANAGER_H_
#define CASTSERVE_SERVER_TEST_UTIL_FAKE_MODEL_MANAGER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "models/model.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/served_model_handle.h"

namespace castserve::testing {

// Signature: input "x" FP32 [-1, 2] (batch first, max_batch_size 4),
// optional input "scale" FP32 [-1, 1]; outputs "y" = x * 2 (* scale) and
// "sum" = row sums [-1]. Infer answers on a thread of its own.
class FakeServedModel : public ServedModel {
 public:
  explicit FakeServedModel(const std::string& name);

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override {
    return wire_inputs_;
  }
  const std::vector<TensorSpec>& outputs() const override {
    return wire_outputs_;
  }
  // Validates with the served models' own DecodeRequest.
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;
  int64_t pending_requests() const override { return 0; }
  ServedModelStatistics statistics() const override;
  casting::Footprint footprint() const override;
  // 1000 on the CPU, plus device_bytes() once placed on a CUDA device.
  int64_t tracked_bytes() const override { return 1000 + device_bytes(); }
  casting::Device device() const override;
  int64_t device_bytes() const override;
  // As a servable reports it (MemoryUsageOf).
  std::vector<MemoryUsageEntry> memory_usage() const override;
  // Reports `device` and `device_bytes` from now on.
  void PlaceOn(const casting::Device& device, int64_t device_bytes);

  // Requests seen so far (the last one's deadline, for deadline tests).
  int infer_calls() const;
  absl::Time last_deadline() const;

  // While held, valid requests wait before they run (a slow forward);
  // Release lets them run, checking their cancellation first.
  void Hold();
  void Release();
  // Requests waiting in Hold now.
  int held() const;

 private:
  inference::ModelConfig config_;
  std::vector<models::TensorSpec> inputs_;
  std::vector<models::TensorSpec> outputs_;
  std::vector<TensorSpec> wire_inputs_;
  std::vector<TensorSpec> wire_outputs_;
  ModelStatisticsRecorder recorder_;
  mutable absl::Mutex mutex_;
  int infer_calls_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_deadline_ ABSL_GUARDED_BY(mutex_);
  casting::Device device_ ABSL_GUARDED_BY(mutex_);
  int64_t device_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  bool holding_ ABSL_GUARDED_BY(mutex_) = false;
  int held_ ABSL_GUARDED_BY(mutex_) = 0;
};

class FakeModelManager : public ModelManager {
 public:
  // `lazy` models are UNAVAILABLE until GetReady or Load; `broken` ones fail
  // every load with UNAVAILABLE "broken checkpoint".
  void AddModel(const std::string& name, bool lazy = false,
                bool broken = false);
  std::shared_ptr<FakeServedModel> model(const std::string& name);
  // A READY model served by `served` (a generation model, say) instead of a
  // FakeServedModel.
  void AddServedModel(const std::string& name,
                      std::shared_ptr<ServedModel> served);
  // The config_override of the last Load of `name`.
  std::optional<inference::ModelConfig> last_override(const std::string& name);

  void LoadStartupModels() override {}
  absl::StatusOr<std::shared_ptr<ServedModel>> GetReady(
      const std::string& name, const std::string& version,
      absl::Time deadline) override;
  absl::Status Load(
      const std::string& name,
      std::optional<inference::ModelConfig> config_override) override;
  absl::Status Unload(const std::string& name) override;
  // Nothing of the fake runs long enough to cancel.
  void CancelAll(const std::string& reason) override {}
  std::vector<ModelStatus> Index() override;
  absl::StatusOr<ModelStatus> Status(const std::string& name) override;
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
  ReadyModels() override;
  // Marks the READY model's tier (Index reports it); FAILED_PRECONDITION
  // when it is not READY.
  absl::Status MoveTo(const std::string& name,
                      casting::WeightTier tier) override;

 private:
  struct Entry {
    std::shared_ptr<FakeServedModel> model;
    // When set, what GetReady and ReadyModels return instead of `model`.
    std::shared_ptr<ServedModel> served;
    bool ready = false;
    bool broken = false;
    std::string reason;
    std::optional<inference::ModelConfig> last_override;
    casting::WeightTier tier = casting::WeightTier::kHot;
  };
  absl::Status LoadLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  absl::Mutex mutex_;
  std::map<std::string, Entry> models_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace castserve::testing

#endif  // CASTSERVE_SERVER_TEST_UTIL_FAKE_MODEL_MANAGER_H_
