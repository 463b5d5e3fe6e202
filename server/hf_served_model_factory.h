// The ServedModelFactory for Hugging Face checkpoint folders: a model's
// config.pbtxt becomes a weight policy, the folder is loaded with
// models::LoadHfModel (attributed to the model by the tracking allocator),
// the config's signature is filled in or checked against the architecture's,
// the folder's tokenizer (if any) becomes the model's `text` input
// (text_input.h; a tokenizer that does not load leaves text unavailable with
// the reason, logged, and the model serving its token inputs), and the
// warmup requests run before the model is handed over.
#ifndef CASTSERVE_SERVER_HF_SERVED_MODEL_FACTORY_H_
#define CASTSERVE_SERVER_HF_SERVED_MODEL_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "casting/device.h"
#include "models/model.h"
#include "models/weight_factory.h"
#include "proto/model_config.pb.h"
#include "server/model_manager.h"
#include "server/served_model.h"
#include "server/text_input.h"
#include "server/tracked_model_id.h"

namespace castserve {

// The daemon's settings for every model it loads (server flags).
struct FactoryOptions {
  // Threads per forward for models without INTRA_OP_THREAD_COUNT; 0: the
  // hardware threads divided by the model's instance count (at least 1).
  int intra_op_threads = 0;
  // LibTorch's inter-op pool; 0 keeps its default.
  int inter_op_threads = 0;
  // The model folder, its checkpoint folder and files and its warmup data
  // files may be symlinks that lead outside the repository (the folder
  // that holds the model folder); see RepositoryBoundary.
  bool allow_symlinks_outside_repository = false;

  // Limits on what a config may ask for, checked before anything is
  // allocated or started: a config past one fails to load with the limit
  // named.
  // The inputs of one warmup request together (as --max-message-bytes
  // bounds a request).
  int64_t max_warmup_request_bytes = int64_t{256} << 20;
  // Instances (threads running forwards) of one model.
  int max_instances = 16;
  // Runs of one warmup entry (`count`).
  int64_t max_warmup_count = 1000;
  // All of one model's warmups together; past it the load fails with
  // DEADLINE_EXCEEDED.
  absl::Duration max_warmup_duration = absl::Minutes(5);
};

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
  // (models/configured_footprint.h) for the config's instance count, plus
  // the buffers the build allocated (the tracking allocator's bytes) and,
  // for a generation model, its KV-cache pool (generation.kv_cache_bytes).
  // Create's errors for a bad config or checkpoint.
  absl::StatusOr<int64_t> ProjectedBytes(
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
  absl::StatusOr<int64_t> Project(const std::string& model_directory,
                                  const inference::ModelConfig& config);
  absl::StatusOr<std::shared_ptr<ServedModel>> Load(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation);

  const FactoryOptions options_;
};

// The pieces of Create, exposed for tests.

// The config's sizes against `options`' limits (instances, warmup counts),
// checked before anything is allocated or started. INVALID_ARGUMENT naming
// the limit.
absl::Status CheckConfigLimits(const inference::ModelConfig& config,
                               const FactoryOptions& options);

// The device `config`'s instance_group places the model on: cuda:N for
// KIND_GPU with gpus [N] (cuda:0 when gpus is empty), the CPU for KIND_CPU,
// KIND_AUTO and KIND_MODEL groups or none. INVALID_ARGUMENT for a negative
// ordinal; UNIMPLEMENTED for more than one device (instances share one set
// of weights). Does not check that the device exists (casting/device_probe.h).
absl::StatusOr<casting::Device> DeviceFromConfig(
    const inference::ModelConfig& config);

// The weight policy of `weights`: residency, compute copy, eager
// materialization, prefetch, and a casting policy when a storage dtype is
// set (the default skip patterns first unless no_default_skip_patterns).
absl::StatusOr<models::WeightPolicyOptions> WeightPolicyFromConfig(
    const inference::WeightPolicy& weights);

// `model_directory` joined with `checkpoint_path` (the directory itself when
// empty). INVALID_ARGUMENT for an absolute path or one that leaves the
// repository (the model directory's parent) through "..". Lexical: symbolic
// links inside the repository are followed as the operator placed them.
absl::StatusOr<std::string> CheckpointFolder(
    const std::string& model_directory, const std::string& checkpoint_path);

// Fills `config`'s empty inputs / outputs from the signature (dims without
// the batch dimension when max_batch_size > 0), or checks the ones given:
// every name must be in the signature with its data type and rank, a fixed
// dimension must match (a variable one may be fixed by the config), and every
// required input must be listed. INVALID_ARGUMENT naming the tensor.
absl::Status ApplySignature(const std::vector<models::TensorSpec>& inputs,
                            const std::vector<models::TensorSpec>& outputs,
                            inference::ModelConfig* config);

// The `text` input in `config` (text_input.h): added as an optional
// TYPE_STRING input with dims [1] ([-1, 1] without batching) when `text` is
// available and the config does not list it; a listed one must have that
// type and those dims and needs an available `text`. INVALID_ARGUMENT
// otherwise.
absl::Status ApplyTextSignature(const TextInput& text,
                                inference::ModelConfig* config);

// The LibTorch threads each instance of `config` runs a forward on: the
// model's INTRA_OP_THREAD_COUNT parameter (as in Triton's PyTorch backend),
// else `default_threads` when > 0, else `hardware_threads` divided by the
// model's instance count, at least 1 (instances x threads never
// oversubscribe the cores by default). INVALID_ARGUMENT for a parameter that
// is not an integer between 1 and kMaxThreads.
absl::StatusOr<int> IntraOpThreadsFor(const inference::ModelConfig& config,
                                      int default_threads,
                                      int hardware_threads);

// The inputs of the request `warmup` describes against `config` (inputs and
// data types checked; data files read relative to `model_directory`, same path
// rules as the checkpoint, regular files only). INVALID_ARGUMENT before
// anything is allocated when its inputs together would exceed `max_bytes`.
absl::StatusOr<models::NamedTensors> MakeWarmupRequest(
    const inference::ModelWarmup& warmup, const inference::ModelConfig& config,
    const std::string& model_directory, int64_t max_bytes);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HF_SERVED_MODEL_FACTORY_H_
