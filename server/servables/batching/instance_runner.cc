#include "server/servables/batching/instance_runner.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "casting/memory/device_model_memory.h"
#include "casting/memory/tracking_allocator.h"

namespace castserve {
namespace {

absl::StatusOr<models::CheckedInputs> Concatenate(
    const std::vector<QueuedPtr>& batch) {
  return models::CatchExceptions(
      [&]() -> absl::StatusOr<models::CheckedInputs> {
        std::vector<const models::CheckedInputs*> parts;
        parts.reserve(batch.size());
        for (const QueuedPtr& queued : batch) {
          parts.push_back(&queued->request->inputs);
        }
        return models::CheckedInputs::Join(parts);
      });
}

// The outputs of one request: rows [offset, offset + size) of the batch's
// outputs (all of them when `whole`), filtered to `requested`.
absl::StatusOr<models::NamedTensors> SliceOutputs(
    const models::NamedTensors& outputs, bool whole, int64_t offset,
    int64_t size, int64_t items, const std::vector<std::string>& requested) {
  models::NamedTensors mine;
  for (const auto& [name, tensor] : outputs) {
    if (!requested.empty() && std::find(requested.begin(), requested.end(),
                                        name) == requested.end()) {
      continue;
    }
    if (whole) {
      mine[name] = tensor;
      continue;
    }
    if (tensor.dim() < 1 || tensor.size(0) != items) {
      return absl::InternalError(absl::StrCat(
          "output ", name, " has no batch dimension of ", items, " items"));
    }
    mine[name] = tensor.narrow(0, offset, size);
  }
  for (const std::string& name : requested) {
    if (mine.count(name) == 0) {
      return absl::InternalError(
          absl::StrCat("the model produced no output ", name));
    }
  }
  return mine;
}

}  // namespace

InstanceRunner::InstanceRunner(std::shared_ptr<const models::Model> model,
                               Options options)
    : model_(std::move(model)), options_(std::move(options)) {}

InstanceRunner::~InstanceRunner() = default;

void InstanceRunner::Start(RequestQueue* queue, const BatchPlanner* planner,
                           Complete complete, RecordBatch record_batch,
                           std::shared_ptr<void> keep_alive) {
  complete_ = std::move(complete);
  record_batch_ = std::move(record_batch);
  for (int i = 0; i < options_.instance_count; ++i) {
    threads_.push_back(platform::Executor::Default().StartThread(
        [this, queue, planner, keep_alive] { InstanceLoop(queue, planner); }));
  }
  threads_.push_back(platform::Executor::Default().StartThread(
      [this, queue, keep_alive] { ReaperLoop(queue); }));
}

void InstanceRunner::Join() {
  for (std::unique_ptr<platform::Thread>& thread : threads_) {
    if (thread->IsCurrent()) {
      platform::Executor::Default().JoinLater(std::move(thread));
    } else {
      thread->Join();
    }
  }
}

void InstanceRunner::InstanceLoop(RequestQueue* queue,
                                  const BatchPlanner* planner) const {
  if (options_.intra_op_threads > 0) {
    // LibTorch keeps the count per thread (OpenMP's and MKL's settings), but
    // sets a thread's from the last process-wide value when the thread first
    // asks for it: ask first (get_num_threads marks this thread initialized
    // inside LibTorch), then set this thread's own.
    (void)at::get_num_threads();
    at::set_num_threads(options_.intra_op_threads);
  }
  for (;;) {
    std::vector<QueuedPtr> batch;
    std::vector<Rejection> dropped;
    const bool keep_running = queue->NextBatch(*planner, &batch, &dropped);
    Reject(std::move(dropped));
    if (!batch.empty()) Execute(std::move(batch));
    if (!keep_running) return;
  }
}

void InstanceRunner::ReaperLoop(RequestQueue* queue) const {
  for (;;) {
    std::vector<Rejection> dropped;
    const bool keep_running = queue->WaitForExpired(&dropped);
    Reject(std::move(dropped));
    if (!keep_running) return;
  }
}

void InstanceRunner::Reject(std::vector<Rejection> rejections) const {
  const absl::Time now = absl::Now();
  for (Rejection& rejection : rejections) {
    InferenceResult result;
    result.outputs = std::move(rejection.status);
    result.queue_duration = now - rejection.queued->enqueue_time;
    complete_(std::move(rejection.queued), std::move(result),
              /*was_running=*/false);
  }
}

void InstanceRunner::Execute(std::vector<QueuedPtr> batch) const {
  const absl::Time start = absl::Now();
  int64_t items = 0;
  for (const QueuedPtr& queued : batch) items += queued->batch_size;
  int64_t peak_increase_bytes = 0;
  absl::StatusOr<models::NamedTensors> outputs =
      RunForward(batch, &peak_increase_bytes);
  if (!outputs.ok() && batch.size() > 1 &&
      absl::IsInvalidArgument(outputs.status())) {
    // One bad request must not fail the others: run each alone.
    for (QueuedPtr& queued : batch) {
      std::vector<QueuedPtr> alone;
      alone.push_back(std::move(queued));
      Execute(std::move(alone));
    }
    return;
  }
  const absl::Time end = absl::Now();
  record_batch_(items, end - start, peak_increase_bytes);
  int64_t offset = 0;
  for (QueuedPtr& queued : batch) {
    InferenceResult result;
    result.queue_duration = start - queued->enqueue_time;
    result.compute_duration = end - start;
    result.executed_batch_size = items;
    if (outputs.ok()) {
      result.outputs =
          SliceOutputs(*outputs, batch.size() == 1, offset, queued->batch_size,
                       items, queued->request->requested_outputs);
    } else {
      result.outputs = outputs.status();
    }
    offset += queued->batch_size;
    complete_(std::move(queued), std::move(result), /*was_running=*/true);
  }
}

absl::StatusOr<models::NamedTensors> InstanceRunner::RunForward(
    const std::vector<QueuedPtr>& batch, int64_t* peak_increase_bytes) const {
  casting::ScopedModelTag tag(options_.model_tag);
  casting::DeviceModelMemory& device = casting::DeviceModelMemory::Global();
  const int64_t device_start =
      options_.device_batch_peak ? device.StartWindow(options_.model_tag) : 0;
  casting::PeakScope peak;
  absl::StatusOr<models::NamedTensors> outputs;
  if (batch.size() == 1) {
    outputs = model_->Run(batch.front()->request->inputs,
                          options_.cancellation.get());
  } else {
    absl::StatusOr<models::CheckedInputs> joined = Concatenate(batch);
    outputs = joined.ok() ? model_->Run(*joined, options_.cancellation.get())
                          : joined.status();
  }
  peak.Stop();
  *peak_increase_bytes =
      options_.device_batch_peak
          ? device.Usage(options_.model_tag).window_peak_bytes - device_start
          : peak.peak_increase_bytes();
  return outputs;
}

absl::Status InstanceRunner::Warmup(const models::NamedTensors& inputs) const {
  casting::ScopedModelTag tag(options_.model_tag);
  return model_->Forward(inputs, options_.cancellation.get()).status();
}

}  // namespace castserve
