// The request types below the servable interface (served_model.h): a
// request whose inputs the model checked, its result, and the queue entry
// that carries it from Enqueue to its completion. Value types.
#ifndef CASTSERVE_SERVER_SERVABLES_BATCHING_QUEUED_REQUEST_H_
#define CASTSERVE_SERVER_SERVABLES_BATCHING_QUEUED_REQUEST_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/model.h"

namespace castserve {

// One request: inputs the model checked, the wire request's other settings
// decoded.
struct InferenceRequest {
  explicit InferenceRequest(models::CheckedInputs checked)
      : inputs(std::move(checked)) {}

  models::CheckedInputs inputs;
  // With max_batch_size > 0 the common first dimension of the inputs, at
  // most max_batch_size; else 1.
  int64_t batch_size = 1;
  // Outputs to return, each one of the model's; empty means all.
  std::vector<std::string> requested_outputs;
  // The request fails with DEADLINE_EXCEEDED, also while queued, after this.
  absl::Time deadline = absl::InfiniteFuture();
  // Polled while queued and before running; true drops the request with
  // CANCELLED. May be null.
  std::function<bool()> is_cancelled;
  // Called with the request's outputs (the requested ones) after a
  // successful forward and before the request is counted: writes the
  // response and returns its status, so that a response that cannot be
  // sent (too large) counts as the failure the client sees. May be null.
  std::function<absl::Status(const models::NamedTensors&)> write_response;
};

// Durations are what Triton's statistics call queue and compute_infer.
struct InferenceResult {
  absl::StatusOr<models::NamedTensors> outputs;
  absl::Duration queue_duration;
  absl::Duration compute_duration;
  // Items in the batch the request ran in (1 without batching).
  int64_t executed_batch_size = 0;
};

// A request waiting in the queue or running. What the queue reads (times,
// cancellation, size and key) is here; the request itself only runs.
struct QueuedRequest {
  std::unique_ptr<InferenceRequest> request;
  std::function<void(InferenceResult)> done;
  // The request's deadline and cancellation (InferenceRequest's).
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> is_cancelled;
  absl::Time enqueue_time;
  // The request's deadline, or earlier by the queue timeout.
  absl::Time queue_deadline = absl::InfiniteFuture();
  int64_t batch_size = 1;
  // Requests with equal non-empty keys may join one batch.
  std::string batch_key;
};
using QueuedPtr = std::unique_ptr<QueuedRequest>;

// A request taken out of the queue without running, and why.
struct Rejection {
  QueuedPtr queued;
  absl::Status status;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_BATCHING_QUEUED_REQUEST_H_
