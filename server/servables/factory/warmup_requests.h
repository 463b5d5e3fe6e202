// The config's model_warmup entries: each made into a request (its inputs
// checked and bounded, data files read inside the repository) and run on the
// model before it is served.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_WARMUP_REQUESTS_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_WARMUP_REQUESTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/model.h"
#include "proto/model_config.pb.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/factory/factory_options.h"

namespace castserve {

// The inputs of the request `warmup` describes against `config` (inputs and
// data types checked; data files read relative to `model_directory`, same path
// rules as the checkpoint, regular files only). INVALID_ARGUMENT before
// anything is allocated when its inputs together would exceed `max_bytes`.
absl::StatusOr<models::NamedTensors> MakeWarmupRequest(
    const inference::ModelWarmup& warmup, const inference::ModelConfig& config,
    const std::string& model_directory, int64_t max_bytes);

// Runs every warmup of `config` on `served`, each `count` times, within
// `options.max_warmup_duration` together (DEADLINE_EXCEEDED past it); the
// first failure fails the load, named after its warmup.
absl::Status RunWarmups(BatchingServedModel& served,
                        const inference::ModelConfig& config,
                        const std::string& model_directory,
                        const FactoryOptions& options);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_WARMUP_REQUESTS_H_
