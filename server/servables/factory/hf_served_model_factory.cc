#include "server/servables/factory/hf_served_model_factory.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/device/device_probe.h"
#include "casting/memory/device_memory.h"
#include "casting/memory/tracking_allocator.h"
#include "models/loading/configured_footprint.h"
#include "models/loading/model_loader.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/log.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/generation/generation_model_loader.h"

namespace castserve {
namespace {

// Set by castserve on a model loaded from a pre-quantized checkpoint: how its
// weights are kept and what of its quantization_config is not applied.
constexpr char kStorageNoteParameter[] = "castserve_weight_storage";

// `config` with the model's storage note (a pre-quantized checkpoint's,
// models/loading/prequantized_weights.h) as the parameter
// kStorageNoteParameter, said once in the log; `config` itself when there is
// none.
inference::ModelConfig WithStorageNote(const inference::ModelConfig& config,
                                       const models::Model& model) {
  const std::string& note = model.storage_note();
  if (note.empty()) return config;
  Log(LogLevel::kInfo, "model weights kept in their checkpoint's format",
      {{"model", config.name()}, {"storage", note}});
  inference::ModelConfig noted = config;
  (*noted.mutable_parameters())[kStorageNoteParameter].set_string_value(note);
  return noted;
}

// Set by castserve on a sequence classifier (a cross-encoder): the names of
// its `scores` columns, config.json's id2label in label order, as a JSON
// list of strings.
constexpr char kScoreLabelsParameter[] = "castserve_score_labels";

// `config` with the model's score labels as kScoreLabelsParameter; `config`
// itself for a model without labels.
inference::ModelConfig WithScoreLabels(inference::ModelConfig config,
                                       const models::Model& model) {
  const std::vector<std::string> labels = model.output_labels();
  if (labels.empty()) return config;
  (*config.mutable_parameters())[kScoreLabelsParameter].set_string_value(
      nlohmann::json(labels).dump(-1, ' ', false,
                                  nlohmann::json::error_handler_t::replace));
  return config;
}

}  // namespace

HfServedModelFactory::HfServedModelFactory(FactoryOptions options)
    : options_(options) {
  if (options_.inter_op_threads > 0) {
    // LibTorch accepts this once, before its pool starts.
    absl::Status set = models::CatchExceptions([this]() -> absl::Status {
      at::set_num_interop_threads(options_.inter_op_threads);
      return absl::OkStatus();
    });
    if (!set.ok()) {
      Log(LogLevel::kWarning, "inter-op threads not set",
          {{"error", set.message()}});
    }
  }
  absl::StatusOr<casting::TrackingAllocator*> installed =
      casting::TrackingAllocator::InstallTrackingCpuAllocator();
  if (!installed.ok()) {
    Log(LogLevel::kWarning,
        "tracking allocator not installed; models are measured by their "
        "weights alone",
        {{"error", installed.status().ToString()}});
  }
  // Per-model GPU bytes, attributed under the tracking allocator's tags
  // (casting/memory/device_model_memory.h); a no-op without CUDA or a device.
  casting::InstallCudaModelMemoryTracker();
}

absl::StatusOr<std::shared_ptr<ServedModel>> HfServedModelFactory::Create(
    const std::string& model_directory, const inference::ModelConfig& config,
    std::shared_ptr<const models::Cancellation> cancellation) {
  // LibTorch may throw anywhere in a load (a tensor it cannot allocate, a
  // checkpoint it rejects): the load fails, nothing else does.
  return models::CatchExceptions(
      [&] { return Load(model_directory, config, std::move(cancellation)); });
}

absl::StatusOr<HfServedModelFactory::LoadPlan> HfServedModelFactory::PlanLoad(
    const std::string& model_directory,
    const inference::ModelConfig& config) const {
  absl::StatusOr<casting::Device> device = DeviceFromConfig(config);
  if (!device.ok()) return device.status();
  if (absl::Status available = casting::CheckDeviceAvailable(*device);
      !available.ok()) {
    return available;
  }
  if (absl::Status valid = CheckConfigLimits(config, options_); !valid.ok()) {
    return valid;
  }
  LoadPlan plan;
  absl::StatusOr<int> intra_op_threads = IntraOpThreadsFor(
      config, options_.intra_op_threads,
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (!intra_op_threads.ok()) return intra_op_threads.status();
  plan.intra_op_threads = *intra_op_threads;
  absl::StatusOr<std::string> folder =
      CheckpointFolder(model_directory, config.checkpoint().path());
  if (!folder.ok()) return folder.status();
  plan.folder = *std::move(folder);
  if (absl::Status inside =
          CheckInsideRepository(model_directory, plan.folder, config,
                                options_.allow_symlinks_outside_repository);
      !inside.ok()) {
    return inside;
  }
  absl::StatusOr<models::WeightPolicyOptions> options =
      WeightPolicyFromConfig(config.weights());
  if (!options.ok()) return options.status();
  plan.weights = *std::move(options);
  plan.weights.device = *device;
  return plan;
}

absl::StatusOr<std::unique_ptr<models::Model>> HfServedModelFactory::BuildModel(
    const LoadPlan& plan, const models::WeightPolicyOptions& weights,
    const inference::ModelConfig& config, const TrackedModelId& tracked_id) {
  absl::StatusOr<std::unique_ptr<models::Model>> model;
  {
    casting::ScopedModelTag tag(tracked_id.id());
    model = models::LoadHfModel(plan.folder, weights, config.architecture());
  }
  if (!model.ok()) {
    return absl::Status(
        model.status().code(),
        absl::StrCat(plan.folder, ": ", model.status().message()));
  }
  return model;
}

absl::StatusOr<int64_t> HfServedModelFactory::ProjectedBytes(
    const std::string& model_directory, const inference::ModelConfig& config) {
  absl::StatusOr<TierBytes> tiers = ProjectedTierBytes(model_directory, config);
  if (!tiers.ok()) return tiers.status();
  return tiers->hot;
}

absl::StatusOr<TierBytes> HfServedModelFactory::ProjectedTierBytes(
    const std::string& model_directory, const inference::ModelConfig& config) {
  return models::CatchExceptions([&]() -> absl::StatusOr<TierBytes> {
    return Project(model_directory, config);
  });
}

absl::StatusOr<TierBytes> HfServedModelFactory::Project(
    const std::string& model_directory, const inference::ModelConfig& config) {
  absl::StatusOr<LoadPlan> plan = PlanLoad(model_directory, config);
  if (!plan.ok()) return plan.status();
  // Built lazily whatever the policy says (eager would read every weight):
  // the module tree and its weights' headers are what the projection needs.
  models::WeightPolicyOptions lazy = plan->weights;
  lazy.eager = false;
  std::unique_ptr<TrackedModelId> tracked_id =
      TrackedModelId::Register(config.name());
  absl::StatusOr<std::unique_ptr<models::Model>> model =
      BuildModel(*plan, lazy, config, *tracked_id);
  if (!model.ok()) return model.status();
  const casting::Footprint footprint = models::ConfiguredFootprint(
      (*model)->root(), plan->weights, InstanceCount(config));
  // What the lazy build allocated is buffers beside the weights (position
  // ids, rotary tables): the served model holds them too, in every tier.
  // A generation model's KV pool counts whole in the hot and warm tiers;
  // the cool tier frees the blocks no sequence holds. Neither it nor the
  // transient copies' bound count in the cool tier: no forward runs there
  // before the promotion that reserves them again (a request promotes
  // first).
  const int64_t kv_pool_bytes =
      config.has_generation()
          ? WithGenerationDefaults(config.generation()).kv_cache_bytes()
          : 0;
  TierBytes tiers;
  tiers.hot =
      tracked_id->live_bytes() + footprint.owned_bytes() + kv_pool_bytes;
  tiers.warm = tiers.hot - footprint.cached_compute_bytes();
  tiers.cool = tiers.warm - footprint.total_resident_bytes() -
               footprint.transient_compute_bytes() - kv_pool_bytes;
  return tiers;
}

absl::StatusOr<std::shared_ptr<ServedModel>> HfServedModelFactory::Load(
    const std::string& model_directory, const inference::ModelConfig& config,
    std::shared_ptr<const models::Cancellation> cancellation) {
  absl::StatusOr<LoadPlan> plan = PlanLoad(model_directory, config);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<TrackedModelId> tracked_id =
      TrackedModelId::Register(config.name());
  absl::StatusOr<std::unique_ptr<models::Model>> model =
      BuildModel(*plan, plan->weights, config, *tracked_id);
  if (!model.ok()) return model.status();
  const std::string& folder = plan->folder;
  const inference::ModelConfig noted =
      WithScoreLabels(WithStorageNote(config, **model), **model);
  if (config.has_generation()) {
    return LoadGenerationModel(folder, noted, *std::move(model),
                               std::move(tracked_id), std::move(cancellation));
  }
  std::shared_ptr<const TextInput> text =
      TextInputFor(folder, **model, config.name());
  inference::ModelConfig effective = noted;
  if (effective.platform().empty()) effective.set_platform(kDefaultPlatform);
  if (effective.backend().empty()) effective.set_backend(kDefaultBackend);
  absl::Status valid =
      ApplySignature((*model)->inputs(), (*model)->outputs(), &effective);
  if (valid.ok()) valid = ApplyTextSignature(*text, &effective);
  if (!valid.ok()) return valid;
  absl::StatusOr<std::unique_ptr<BatchingServedModel>> served =
      BatchingServedModel::Create(
          std::move(effective),
          std::shared_ptr<models::Model>(*std::move(model)),
          std::move(tracked_id), plan->intra_op_threads,
          std::move(cancellation), std::move(text));
  if (!served.ok()) return served.status();
  if (absl::Status warm =
          RunWarmups(**served, (*served)->config(), model_directory, options_);
      !warm.ok()) {
    return warm;
  }
  return std::shared_ptr<ServedModel>(*std::move(served));
}

}  // namespace castserve
