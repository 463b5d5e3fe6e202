// UnroutedRequests: the requests InferenceCore refused before a model took
// them, exported by ServingMetrics.
#ifndef CASTSERVE_SERVER_METRICS_UNROUTED_REQUESTS_H_
#define CASTSERVE_SERVER_METRICS_UNROUTED_REQUESTS_H_

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/lifecycle/model_statistics_recorder.h"

namespace castserve {

// Inference requests refused before any model took them (unknown or
// unavailable model, a malformed parameter), by status code. Exported as
// castserve_request_failure_total without model and version labels, so
// that the family counts every failed request. Thread-safe.
class UnroutedRequests {
 public:
  // The process's instance, which the inference service records into.
  static UnroutedRequests& Global();

  void Record(absl::StatusCode code);
  CountsByCode snapshot() const;

 private:
  mutable absl::Mutex mu_;
  CountsByCode by_code_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_METRICS_UNROUTED_REQUESTS_H_
