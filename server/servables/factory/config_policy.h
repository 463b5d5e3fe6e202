// What a model's config.pbtxt asks of the load, decided before the
// checkpoint is opened: the limits it is held to, the device its
// instance_group names, the weight policy, the threads per forward.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_CONFIG_POLICY_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_CONFIG_POLICY_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "casting/device/device.h"
#include "models/loading/weight_policy.h"
#include "proto/model_config.pb.h"
#include "server/servables/factory/factory_options.h"

namespace castserve {

// The config's sizes against `options`' limits (instances, warmup counts),
// checked before anything is allocated or started. INVALID_ARGUMENT naming
// the limit.
absl::Status CheckConfigLimits(const inference::ModelConfig& config,
                               const FactoryOptions& options);

// The device `config`'s instance_group places the model on: cuda:N for
// KIND_GPU with gpus [N] (cuda:0 when gpus is empty), the CPU for KIND_CPU,
// KIND_AUTO and KIND_MODEL groups or none. INVALID_ARGUMENT for a negative
// ordinal; UNIMPLEMENTED for more than one device (instances share one set
// of weights). Does not check that the device exists
// (casting/device/device_probe.h).
absl::StatusOr<casting::Device> DeviceFromConfig(
    const inference::ModelConfig& config);

// The weight policy of `weights`: residency, compute copy, eager
// materialization, prefetch, and a casting policy when a storage dtype is
// set (the default skip patterns first unless no_default_skip_patterns).
absl::StatusOr<models::WeightPolicyOptions> WeightPolicyFromConfig(
    const inference::WeightPolicy& weights);

// The LibTorch threads each instance of `config` runs a forward on: the
// model's INTRA_OP_THREAD_COUNT parameter (as in Triton's PyTorch backend),
// else `default_threads` when > 0, else `hardware_threads` divided by the
// model's instance count, at least 1 (instances x threads never
// oversubscribe the cores by default). INVALID_ARGUMENT for a parameter that
// is not an integer between 1 and kMaxThreads.
absl::StatusOr<int> IntraOpThreadsFor(const inference::ModelConfig& config,
                                      int default_threads,
                                      int hardware_threads);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_CONFIG_POLICY_H_
