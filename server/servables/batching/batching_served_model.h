// The ServedModel around a models::Model: one queue, a dynamic batcher and N
// instance threads running forwards on one shared set of weights. It is the
// composition of a RequestQueue (request_queue.h), a BatchPlanner
// (batch_planner.h), an InstanceRunner (instance_runner.h) and a
// ModelStatisticsRecorder (model_statistics_recorder.h).
//
// Validate once, at the edge: Infer decodes and checks the wire request
// completely (DecodeRequest in tensor_conversion.h: names, datatypes, shapes,
// the batch limit, byte sizes, requested outputs; then the model's limits,
// models::Model::CheckLimits) before it is queued, and counts a refused one
// once. What runs below is a checked InferenceRequest; the queue and the
// forward assert its invariants instead of checking them again.
//
// Batching (config.dynamic_batching present and max_batch_size > 0): queued
// requests whose inputs have the same names, dtypes and non-batch dimensions
// join, oldest first, into a batch of at most max_batch_size items. A batch
// runs as soon as it is full or reaches a preferred batch size, else when the
// oldest request has waited max_queue_delay_microseconds. Inputs are
// concatenated along dimension 0 and every output is split back along it.
// Variable-length token inputs are never padded further: only identical
// shapes join. A text request is padded to its own longest string
// (text_input.h), so text requests join only when their padded lengths are
// equal, and every request's outputs are the ones it would get alone.
// Without dynamic_batching every request runs alone.
//
// Deadlines and cancellation are checked while requests wait (a few
// milliseconds apart) and right before a batch runs. The queue holds at most
// default_queue_policy.max_queue_size requests (1024 when 0); beyond that
// Infer answers RESOURCE_EXHAUSTED at once. default_timeout_microseconds
// bounds the time in the queue.
//
// If a batched forward fails with INVALID_ARGUMENT (one request's bad value
// that LibTorch rejects), each of its requests runs again alone so that
// only the bad one fails.
//
// Memory: every forward (and the concatenation and split around it) runs
// under a casting::ScopedModelTag of the model's TrackedModelId.
#ifndef CASTSERVE_SERVER_SERVABLES_BATCHING_BATCHING_SERVED_MODEL_H_
#define CASTSERVE_SERVER_SERVABLES_BATCHING_BATCHING_SERVED_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/memory/footprint.h"
#include "models/cancellation.h"
#include "models/model.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/model_statistics_recorder.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/batching/queued_request.h"
#include "server/servables/served_model_handle.h"
#include "server/servables/text_input.h"
#include "server/servables/tracked_model_id.h"

namespace castserve {

// How many instances `config` asks for: the sum of its instance groups'
// counts (a group counts at least 1), 1 without groups.
int InstanceCount(const inference::ModelConfig& config);

// The footprint of `model`'s weights by state, and their copies since load
// with its prefetches and `tracked_id`'s peaks (may be null): what a served
// model's footprint() and activity() report.
casting::Footprint ModelFootprint(models::Model& model);
ServedModelActivity ModelActivity(models::Model& model,
                                  const TrackedModelId* tracked_id);

// Thread-safe. Destroying it fails the queued requests with UNAVAILABLE and
// waits for running forwards; it may be destroyed from inside a `done`
// callback (the last reference dropped on a worker thread). Each executed
// batch's peak memory is measured with a casting::PeakScope around it.
class BatchingServedModel final : public ServedModelHandle {
 public:
  // `config` is the effective configuration (signature filled in);
  // `model` runs the forwards; `tracked_id` (may be null) tags them and is
  // released only after the model is destroyed. Each instance thread runs
  // its forwards on `intra_op_threads` LibTorch threads (0 leaves LibTorch's
  // setting). Once `cancellation` (may be null) is set, running forwards
  // stop at their next module and later ones fail at once: CANCELLED.
  // `text` (may be null: no tokenizer) turns a request's `text` input into
  // the token inputs; when available, inputs() lists "text" after the
  // model's inputs. InvalidArgument for a negative max_batch_size or
  // instance count.
  static absl::StatusOr<std::unique_ptr<BatchingServedModel>> Create(
      inference::ModelConfig config, std::shared_ptr<models::Model> model,
      std::unique_ptr<TrackedModelId> tracked_id, int intra_op_threads = 0,
      std::shared_ptr<const models::Cancellation> cancellation = nullptr,
      std::shared_ptr<const TextInput> text = nullptr);
  ~BatchingServedModel() override;

  // Runs `inputs` alone on the calling thread, outside the queue and the
  // statistics, checked by models::Model::CheckInputs: what warmup requests
  // use before the model is served.
  absl::Status Warmup(const models::NamedTensors& inputs);

  // The model that checks and runs the inputs of Enqueue.
  const models::Model& model() const;

  // Queues `request`, whose inputs this model() checked (asserted, as are
  // its batch size and requested outputs); `done` runs exactly once, as for
  // Infer. What Infer does once the wire request is decoded.
  void Enqueue(InferenceRequest request,
               std::function<void(InferenceResult)> done);

  // ServedModel (ServedModelHandle forwards it to the body). Infer decodes
  // the wire request (DecodeRequest in tensor_conversion.h, then the model's
  // CheckLimits) and Enqueues it.

 private:
  class Impl;
  explicit BatchingServedModel(std::shared_ptr<Impl> impl);
  // The body, shared with the worker threads.
  Impl& impl() const;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_BATCHING_BATCHING_SERVED_MODEL_H_
