// InstanceRunner: a served model's instances, the threads that run its
// forwards. Each instance thread takes batches from the RequestQueue (as the
// BatchPlanner forms them) and runs them: the checked inputs joined along
// dimension 0, one forward under the model's TrackedModelId tag and a
// casting::PeakScope, the outputs split back per request. If a batched
// forward fails with INVALID_ARGUMENT (one request's bad value), each of its
// requests runs again alone so that only the bad one fails. A reaper thread
// answers requests that expire or are cancelled while queued.
//
// What happens to a finished or dropped request is the owner's: `complete`
// (with was_running) and `record_batch` are called from the threads.
//
// Thread-safe. Start once, Join once; the queue, planner and model must
// outlive the threads (the owner keeps them alive until Join returns, or
// until a thread that calls Join on itself returns).
#ifndef CASTSERVE_SERVER_SERVABLES_BATCHING_INSTANCE_RUNNER_H_
#define CASTSERVE_SERVER_SERVABLES_BATCHING_INSTANCE_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/cancellation.h"
#include "models/model.h"
#include "platform/executor.h"
#include "server/servables/batching/batch_planner.h"
#include "server/servables/batching/queued_request.h"
#include "server/servables/batching/request_queue.h"

namespace castserve {

class InstanceRunner {
 public:
  struct Options {
    int instance_count = 1;
    // LibTorch threads per forward on each instance; 0 leaves LibTorch's.
    int intra_op_threads = 0;
    // The tracking allocator's model id (casting::ScopedModelTag); empty
    // for none.
    std::string model_tag;
    // The model runs on a CUDA device: each batch's peak is the rise of the
    // model's device bytes (casting/memory/device_model_memory.h, under
    // `model_tag`), not of the CPU tracking allocator's.
    bool device_batch_peak = false;
    // Once set, running forwards stop at their next module: CANCELLED.
    std::shared_ptr<const models::Cancellation> cancellation;
  };
  // Called once per request the threads finish or drop.
  using Complete =
      std::function<void(QueuedPtr, InferenceResult, bool was_running)>;
  // Called once per executed forward: items, compute time, and the peak
  // increase of the tracking allocator's live bytes during it (of the
  // model's device bytes with `device_batch_peak`).
  using RecordBatch = std::function<void(int64_t items, absl::Duration compute,
                                         int64_t peak_increase_bytes)>;

  InstanceRunner(std::shared_ptr<const models::Model> model, Options options);
  ~InstanceRunner();
  InstanceRunner(const InstanceRunner&) = delete;
  InstanceRunner& operator=(const InstanceRunner&) = delete;

  // Starts the instance threads and the reaper on `queue`. Each thread holds
  // `keep_alive` (the owner of the queue, the planner and this object).
  void Start(RequestQueue* queue, const BatchPlanner* planner,
             Complete complete, RecordBatch record_batch,
             std::shared_ptr<void> keep_alive);
  // Joins the threads once the queue is stopped; the calling thread, if it
  // is one of them, is handed to the executor, which joins it once its
  // callback returns (holding `keep_alive`).
  void Join();

  // Runs `batch` (taken from the queue) and completes each of its requests.
  void Execute(std::vector<QueuedPtr> batch) const;

  // Completes each of `rejections` (requests the queue gave up: expired,
  // cancelled, or stopped) with its status, without running it. After Start.
  void Reject(std::vector<Rejection> rejections) const;

  // One forward of `inputs` alone, checked by Model::CheckInputs, under the
  // model's tag: what warmups use before the model is served.
  absl::Status Warmup(const models::NamedTensors& inputs) const;

 private:
  void InstanceLoop(RequestQueue* queue, const BatchPlanner* planner) const;
  void ReaperLoop(RequestQueue* queue) const;
  // One forward of the batch's joined inputs; sets `*peak_increase_bytes`.
  absl::StatusOr<models::NamedTensors> RunForward(
      const std::vector<QueuedPtr>& batch, int64_t* peak_increase_bytes) const;

  const std::shared_ptr<const models::Model> model_;
  const Options options_;
  // Set by Start, before the threads.
  Complete complete_;
  RecordBatch record_batch_;
  // Written by Start and Join only, which never run concurrently.
  std::vector<std::unique_ptr<platform::Thread>> threads_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_BATCHING_INSTANCE_RUNNER_H_
