// GenerationEngine: what a generation model hands its sequences to. The
// daemon's engine is the model's models::GenerationScheduler
// (scheduler_generation_engine.h); tests substitute a scripted one
// (test_util/fake_generation_engine.h). The contract is the scheduler's
// (models/generation/generation_scheduler.h): Submit runs request.on_done
// exactly once, callbacks run on the engine's step thread, Stop ends every
// sequence with UNAVAILABLE and joins it.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_ENGINE_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_ENGINE_H_

#include "models/generation/generation_scheduler.h"

namespace castserve {

// Thread-safe.
class GenerationEngine {
 public:
  virtual ~GenerationEngine() = default;
  virtual void Submit(models::SequenceRequest request) = 0;
  // Idempotent; must not be called from a callback.
  virtual void Stop() = 0;
  virtual models::SchedulerStats stats() const = 0;
  // Whether the KV memory no sequence holds is kept for the next sequences
  // (the scheduler's KeepUnheldBlocks): false frees it and, until true
  // again, every block once no sequence holds it; returns once the memory
  // unheld now is freed, or at once after Stop.
  virtual void KeepUnheldBlocks(bool keep) = 0;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_ENGINE_H_
