// The load path of a generation model (a config with `generation`), for
// HfServedModelFactory: the loaded decoder becomes a GenerationServedModel
// over its GenerationScheduler, with the folder's tokenizer when it has one.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_MODEL_LOADER_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/cancellation.h"
#include "models/model.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/tracked_model_id.h"

namespace castserve {

// `model` was loaded from `folder` for `config` (which has `generation`,
// validated) under `tracked_id`; `cancellation` (may be null) is the
// model's (GenerationModelParts). InvalidArgument naming the field when the
// architecture does not generate; the scheduler's errors for pool options it
// refuses; the tokenizer's when the folder has one that does not load.
absl::StatusOr<std::shared_ptr<ServedModel>> LoadGenerationModel(
    const std::string& folder, const inference::ModelConfig& config,
    std::unique_ptr<models::Model> model,
    std::unique_ptr<TrackedModelId> tracked_id,
    std::shared_ptr<const models::Cancellation> cancellation);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_MODEL_LOADER_H_
