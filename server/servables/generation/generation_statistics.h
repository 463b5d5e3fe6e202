// GenerationStatistics: what one generation model counts in its
// ModelStatisticsRecorder — every request once (success or its failure),
// time to first token and the time between tokens — timed on a
// platform::Clock. Thread-safe (the recorder is).
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_STATISTICS_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_STATISTICS_H_

#include "absl/status/status.h"
#include "platform/clock.h"
#include "server/lifecycle/model_statistics_recorder.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/generation/generation_sequence.h"

namespace castserve {

class GenerationStatistics {
 public:
  // `clock` outlives this.
  explicit GenerationStatistics(platform::Clock& clock) : clock_(clock) {}

  // Notes that `sequence` arrives now.
  void Arrived(GenerationSequence& sequence);
  // Times the token `sequence` got now (the first one since its arrival,
  // the others since the last one).
  void Token(GenerationSequence& sequence);
  // Counts `sequence`'s request, ended now with `code`.
  void Ended(const GenerationSequence& sequence, absl::StatusCode code);

  ServedModelStatistics snapshot() const { return recorder_.snapshot(); }

 private:
  platform::Clock& clock_;
  ModelStatisticsRecorder recorder_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_STATISTICS_H_
