// The daemon's GenerationEngine: a models::GenerationScheduler of one model.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_SCHEDULER_GENERATION_ENGINE_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_SCHEDULER_GENERATION_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/generation/generation_scheduler.h"
#include "models/model.h"
#include "server/servables/generation/generation_engine.h"

namespace castserve {

// As models::GenerationScheduler::Create; `model` must outlive the engine.
absl::StatusOr<std::unique_ptr<GenerationEngine>> CreateSchedulerEngine(
    const models::Model& model, const models::SchedulerOptions& options);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_SCHEDULER_GENERATION_ENGINE_H_
