#include "server/servables/generation/generation_statistics.h"

namespace castserve {

void GenerationStatistics::Arrived(GenerationSequence& sequence) {
  sequence.arrival = clock_.Now();
}

void GenerationStatistics::Token(GenerationSequence& sequence) {
  const absl::Time now = clock_.Now();
  if (sequence.tokens.empty()) {
    recorder_.RecordFirstToken(now - sequence.arrival);
  } else {
    recorder_.RecordNextToken(now - sequence.last_token);
  }
  sequence.last_token = now;
}

void GenerationStatistics::Ended(const GenerationSequence& sequence,
                                 absl::StatusCode code) {
  const absl::Time now = clock_.Now();
  const absl::Duration total = now - sequence.arrival;
  const bool ran = !sequence.tokens.empty();
  recorder_.RecordRequest({code, ran ? 1 : 0, absl::ZeroDuration(),
                           ran ? total : absl::ZeroDuration(), total},
                          now);
}

}  // namespace castserve
