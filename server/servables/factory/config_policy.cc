#include "server/servables/factory/config_policy.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "casting/casting_policy.h"
#include "casting/codec/storage_format.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/proto_dtypes.h"
#include "server/server_flags.h"

namespace castserve {
namespace {

// The model config parameter Triton's PyTorch backend reads for the same.
constexpr char kIntraOpThreadsParameter[] = "INTRA_OP_THREAD_COUNT";

absl::Status WithContext(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace

absl::Status CheckConfigLimits(const inference::ModelConfig& config,
                               const FactoryOptions& options) {
  const int instances = InstanceCount(config);
  if (instances > options.max_instances) {
    return absl::InvalidArgumentError(
        absl::StrCat("instance_group asks for ", instances,
                     " instances, above the limit of ", options.max_instances,
                     " (--max-instances-per-model)"));
  }
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    if (warmup.count() > options.max_warmup_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warmup '", warmup.name().substr(0, 64), "' has count ",
          warmup.count(), ", above the limit of ", options.max_warmup_count));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<casting::Device> DeviceFromConfig(
    const inference::ModelConfig& config) {
  std::vector<casting::Device> devices;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() != inference::ModelInstanceGroup::KIND_GPU) {
      devices.push_back(casting::Device::Cpu());
      continue;
    }
    if (group.gpus().empty()) devices.push_back(casting::Device::Cuda(0));
    for (int32_t gpu : group.gpus()) {
      if (gpu < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("instance_group KIND_GPU lists GPU ", gpu,
                         ": not a device ordinal"));
      }
      devices.push_back(casting::Device::Cuda(gpu));
    }
  }
  if (devices.empty()) return casting::Device::Cpu();
  for (const casting::Device& device : devices) {
    if (device != devices.front()) {
      return absl::UnimplementedError(absl::StrCat(
          "instance_group places the model on ", devices.front().name(),
          " and ", device.name(),
          ": a model's instances share one set of weights on one device"));
    }
  }
  return devices.front();
}

absl::StatusOr<models::WeightPolicyOptions> WeightPolicyFromConfig(
    const inference::WeightPolicy& weights) {
  models::WeightPolicyOptions options;
  switch (weights.residency()) {
    case inference::RESIDENCY_RESIDENT:
      options.residency = casting::Residency::kResident;
      break;
    case inference::RESIDENCY_MAPPED:
      options.residency = casting::Residency::kMapped;
      break;
    case inference::RESIDENCY_HOST:
      options.residency = casting::Residency::kResident;
      options.storage_on_host = true;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "weights.residency: unknown value ", weights.residency()));
  }
  options.compute_copy =
      weights.compute_copy() == inference::COMPUTE_COPY_TRANSIENT
          ? casting::ComputeCopyPolicy::kTransient
          : casting::ComputeCopyPolicy::kCached;
  options.eager = weights.materialization() == inference::MATERIALIZATION_EAGER;
  options.prefetch = weights.prefetch();
  options.reuse_transient_buffers = weights.reuse_transient_buffers();
  const inference::LayerwiseCasting& layerwise = weights.casting();
  absl::StatusOr<casting::ElementType> compute =
      ComputeElementType(layerwise.compute_dtype());
  if (!compute.ok()) return compute.status();
  options.compute_dtype = *compute;
  if (layerwise.storage_dtype() == inference::STORAGE_DTYPE_UNSPECIFIED) {
    return options;
  }
  absl::StatusOr<casting::ElementType> storage =
      StorageElementType(layerwise.storage_dtype());
  if (!storage.ok()) return storage.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = *storage;
  policy.compute_dtype = *compute;
  // Scaling means nothing for non-fp8 storage; the proto says it is ignored.
  if (casting::IsFp8(*storage)) {
    absl::StatusOr<casting::Scaling> scaling =
        ScalingFromConfig(layerwise.scaling());
    if (!scaling.ok()) return scaling.status();
    policy.scaling = *scaling;
  }
  if (layerwise.no_default_skip_patterns()) policy.skip_modules_pattern.clear();
  policy.skip_modules_pattern.insert(policy.skip_modules_pattern.end(),
                                     layerwise.skip_modules_pattern().begin(),
                                     layerwise.skip_modules_pattern().end());
  policy.skip_modules_classes.assign(layerwise.skip_modules_classes().begin(),
                                     layerwise.skip_modules_classes().end());
  policy.non_blocking = layerwise.non_blocking();
  absl::StatusOr<casting::CastingPolicy> created =
      casting::CastingPolicy::Create(std::move(policy));
  if (!created.ok()) return WithContext(created.status(), "weights.casting: ");
  options.casting = *std::move(created);
  return options;
}

absl::StatusOr<int> IntraOpThreadsFor(const inference::ModelConfig& config,
                                      int default_threads,
                                      int hardware_threads) {
  auto parameter = config.parameters().find(kIntraOpThreadsParameter);
  if (parameter != config.parameters().end()) {
    const std::string& value = parameter->second.string_value();
    int threads = 0;
    if (!absl::SimpleAtoi(value, &threads) || threads < 1 ||
        threads > kMaxThreads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", kIntraOpThreadsParameter, ": '", value.substr(0, 64),
          "' is not a thread count between 1 and ", kMaxThreads));
    }
    return threads;
  }
  if (default_threads > 0) return default_threads;
  return std::max(1, hardware_threads / InstanceCount(config));
}

}  // namespace castserve
