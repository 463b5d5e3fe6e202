// The ServedModelFactory for Hugging Face checkpoint folders: a model's
// config.pbtxt and folder become a ServedModel of the right kind. Each job
// has its file: the config's limits, device, weight policy and threads
// (config_policy.h); the paths the load opens, inside the repository
// (model_boundary.h); the folder loaded with models::LoadHfModel (attributed
// to the model by the tracking allocator); a generation model handed to
// generation/generation_model_loader.h, any other served by a
// BatchingServedModel, with its signature filled in or checked
// (model_signature.h), the folder's tokenizer (if any) as its `text` input
// (text_input_loader.h; a tokenizer that does not load leaves text
// unavailable with the reason, logged, and the model serving its token
// inputs), and the warmup requests run before the model is handed over
// (warmup_requests.h).
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_HF_SERVED_MODEL_FACTORY_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_HF_SERVED_MODEL_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "casting/device/device.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/factory/config_policy.h"
#include "server/servables/factory/factory_options.h"
#include "server/servables/factory/model_boundary.h"
#include "server/servables/factory/model_signature.h"
#include "server/servables/factory/text_input_loader.h"
#include "server/servables/factory/warmup_requests.h"
#include "server/servables/text_input.h"
#include "server/servables/tracked_model_id.h"

namespace castserve {

// Thread-safe: Create may run for several models at once. Serves on the
// device DeviceFromConfig names; a KIND_GPU model where no such CUDA device
// is visible (or castserve was built without CUDA) is UNAVAILABLE with "no
// CUDA device" in the reason. Create never
// throws: whatever LibTorch throws during a load or a warmup fails that load.
class HfServedModelFactory final : public ServedModelFactory {
 public:
  // Installs the tracking CPU allocator if no one has (idempotent). Should
  // another allocator hold the slot, models are measured by their weights'
  // footprint alone (logged). Sizes LibTorch's inter-op pool once.
  explicit HfServedModelFactory(FactoryOptions options = {});

  // Errors: INVALID_ARGUMENT for a bad checkpoint path, weight policy,
  // signature mismatch or warmup request; the loader's errors (NOT_FOUND for
  // a folder without a checkpoint, ...) prefixed with the folder; CANCELLED
  // once `cancellation` (may be null) is set.
  absl::StatusOr<std::shared_ptr<ServedModel>> Create(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation) override;

  // Builds the model lazily (eager or not: no tensor data is read) and
  // returns the owned bytes of its configured footprint
  // (models/loading/configured_footprint.h) for the config's instance count,
  // plus the buffers the build allocated (the tracking allocator's bytes) and,
  // for a generation model, its KV-cache pool (generation.kv_cache_bytes).
  // Create's errors for a bad config or checkpoint.
  absl::StatusOr<int64_t> ProjectedBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) override;
  // The same projection by tier: warm without the cached compute copies,
  // cool also without the resident storage (what Demote frees); the buffers,
  // the transient copies' bound and the KV-cache pool stay in every tier.
  absl::StatusOr<TierBytes> ProjectedTierBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) override;

 private:
  // What Create and ProjectedBytes check and derive from a config first.
  struct LoadPlan {
    std::string folder;                   // The checkpoint folder.
    models::WeightPolicyOptions weights;  // With the device set.
    int intra_op_threads = 1;
  };
  absl::StatusOr<LoadPlan> PlanLoad(const std::string& model_directory,
                                    const inference::ModelConfig& config) const;
  // LoadHfModel of the plan's folder under `weights`, attributed to
  // `tracked_id`; errors prefixed with the folder.
  static absl::StatusOr<std::unique_ptr<models::Model>> BuildModel(
      const LoadPlan& plan, const models::WeightPolicyOptions& weights,
      const inference::ModelConfig& config, const TrackedModelId& tracked_id);
  absl::StatusOr<TierBytes> Project(const std::string& model_directory,
                                    const inference::ModelConfig& config);
  absl::StatusOr<std::shared_ptr<ServedModel>> Load(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation);

  const FactoryOptions options_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_HF_SERVED_MODEL_FACTORY_H_
