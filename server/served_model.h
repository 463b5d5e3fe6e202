// A model the server can send requests to: its configuration (with the
// signature filled in from the architecture), a queue, a dynamic batcher and
// N instances running forwards. Made by the ModelManager when a model loads.
#ifndef CASTSERVE_SERVER_SERVED_MODEL_H_
#define CASTSERVE_SERVER_SERVED_MODEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "casting/footprint.h"
#include "models/model.h"
#include "proto/model_config.pb.h"

namespace castserve {

// The platform and backend reported (ModelMetadata, ModelConfig) for a
// model whose config.pbtxt names none (model_config.proto).
inline constexpr char kDefaultPlatform[] = "castserve_torch";
inline constexpr char kDefaultBackend[] = "castserve";

// One request, already converted from the wire and validated against the
// signature. With max_batch_size > 0 every input carries the batch dimension
// first (the same batch size for all inputs).
struct InferenceRequest {
  models::NamedTensors inputs;
  // Outputs to return; empty means all.
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

// Cumulative counters, as the ModelStatistics RPC reports them.
struct ServedModelStatistics {
  uint64_t inference_count = 0;  // Items (batch elements) inferred.
  uint64_t execution_count = 0;  // Forwards run (batches).
  uint64_t success_count = 0;
  absl::Duration success_duration;
  uint64_t fail_count = 0;
  absl::Duration fail_duration;
  absl::Duration queue_duration;
  absl::Duration compute_duration;
  // Executed batch size -> (count, compute duration).
  std::map<int64_t, std::pair<uint64_t, absl::Duration>> batches;
  // Milliseconds since the epoch of the last inference; 0 if none.
  uint64_t last_inference_ms = 0;
};

class ServedModel {
 public:
  virtual ~ServedModel() = default;

  // The effective configuration: the model's config.pbtxt with inputs and
  // outputs filled in from the architecture's signature when left empty.
  virtual const inference::ModelConfig& config() const = 0;
  virtual const std::vector<models::TensorSpec>& inputs() const = 0;
  virtual const std::vector<models::TensorSpec>& outputs() const = 0;

  // Queues the request; `done` runs exactly once, on a worker thread (or
  // inline when the request is rejected at once: queue full ->
  // RESOURCE_EXHAUSTED, server stopping -> UNAVAILABLE). Thread-safe.
  virtual void Infer(InferenceRequest request,
                     std::function<void(InferenceResult)> done) = 0;

  // Counts a request for this model refused before it was queued (an
  // unknown output, an input of the wrong shape): a failure with `code`,
  // in the statistics and the metrics like every other request.
  virtual void RecordRejection(absl::StatusCode code) = 0;

  // Requests queued or running now.
  virtual int64_t pending_requests() const = 0;
  virtual ServedModelStatistics statistics() const = 0;
  // Memory of the model's weights by state, now.
  virtual casting::Footprint footprint() const = 0;
  // Bytes the tracking allocator attributes to this model now.
  virtual int64_t tracked_bytes() const = 0;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVED_MODEL_H_
