#include "server/batching_served_model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <thread>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/base/thread_annotations.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "casting/tracking_allocator.h"
#include "casting/weight.h"
#include "server/tensor_conversion.h"

namespace castserve {
namespace {

constexpr int64_t kDefaultMaxQueueSize = 1024;
// How often queued requests are checked for cancellation.
constexpr absl::Duration kCancellationPollInterval = absl::Milliseconds(5);

// The scheduling settings of a config, defaults applied.
struct BatchSettings {
  int64_t max_batch_size = 0;
  // Whether queued requests may join into one forward.
  bool joins = false;
  std::vector<int64_t> preferred_batch_sizes;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  absl::Duration queue_timeout = absl::InfiniteDuration();
  int64_t max_queue_size = kDefaultMaxQueueSize;
  int instance_count = 1;
  // LibTorch threads per forward; 0 leaves LibTorch's setting.
  int intra_op_threads = 0;
};

BatchSettings SettingsFromConfig(const inference::ModelConfig& config,
                                 int intra_op_threads) {
  BatchSettings settings;
  settings.max_batch_size = config.max_batch_size();
  settings.intra_op_threads = intra_op_threads;
  settings.joins = config.has_dynamic_batching() && settings.max_batch_size > 1;
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  for (int32_t size : batching.preferred_batch_size()) {
    if (size > 0 && size <= settings.max_batch_size) {
      settings.preferred_batch_sizes.push_back(size);
    }
  }
  settings.max_queue_delay =
      absl::Microseconds(batching.max_queue_delay_microseconds());
  const inference::ModelQueuePolicy& policy = batching.default_queue_policy();
  if (policy.max_queue_size() > 0) {
    settings.max_queue_size = policy.max_queue_size();
  }
  if (policy.default_timeout_microseconds() > 0) {
    settings.queue_timeout =
        absl::Microseconds(policy.default_timeout_microseconds());
  }
  settings.instance_count = InstanceCount(config);
  return settings;
}

// A request waiting in the queue or running.
struct Pending {
  std::unique_ptr<InferenceRequest> request;
  std::function<void(InferenceResult)> done;
  absl::Time enqueue_time;
  // The request's deadline, or earlier by the queue timeout.
  absl::Time queue_deadline;
  int64_t batch_size = 1;
  // Requests with equal non-empty keys may join one batch.
  std::string batch_key;
};
using PendingPtr = std::unique_ptr<Pending>;

struct Rejection {
  PendingPtr pending;
  absl::Status status;
};

// Which queued requests the next batch takes (indices into the queue).
struct BatchPlan {
  std::vector<size_t> indices;
  int64_t items = 0;
  bool ready = false;
};

// Names, dtypes and non-batch dimensions: what must match for requests to
// join.
std::string BatchKeyOf(const models::NamedTensors& inputs) {
  std::string key;
  for (const auto& [name, tensor] : inputs) {
    const std::vector<int64_t> sizes(tensor.sizes().begin() + 1,
                                     tensor.sizes().end());
    absl::StrAppend(&key, name, ":", static_cast<int>(tensor.scalar_type()),
                    ":", tensor.device().str(), "[", absl::StrJoin(sizes, ","),
                    "];");
  }
  return key;
}

absl::StatusOr<models::CheckedInputs> Concatenate(
    const std::vector<PendingPtr>& batch) {
  return models::CatchExceptions(
      [&]() -> absl::StatusOr<models::CheckedInputs> {
        std::vector<const models::CheckedInputs*> parts;
        parts.reserve(batch.size());
        for (const PendingPtr& pending : batch) {
          parts.push_back(&pending->request->inputs);
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

// The sum over the model's weights of `of(weight)`.
template <typename Total, typename Of>
Total SumOverWeights(models::Module& root, Of of) {
  Total total;
  root.Visit([&total, &of](models::Module& module) {
    for (const auto& [name, weight] : module.weights()) total += of(*weight);
  });
  return total;
}

}  // namespace

// ---------------------------------------------------------------------------
// TrackedModelId

std::unique_ptr<TrackedModelId> TrackedModelId::Register(
    absl::string_view name) {
  static std::atomic<uint64_t> next_serial{1};
  std::string id = absl::StrCat(name, "#", next_serial.fetch_add(1));
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  const bool registered =
      allocator != nullptr && allocator->RegisterModel(id).ok();
  return absl::WrapUnique(new TrackedModelId(std::move(id), registered));
}

TrackedModelId::~TrackedModelId() {
  if (registered_) {
    casting::TrackingAllocator::Installed()->UnregisterModel(id_).IgnoreError();
  }
}

int64_t TrackedModelId::live_bytes() const {
  if (!registered_) return 0;
  absl::StatusOr<casting::ModelMemoryUsage> usage =
      casting::TrackingAllocator::Installed()->GetModelUsage(id_);
  return usage.ok() ? usage->live_bytes : 0;
}

int64_t TrackedModelId::peak_bytes() const {
  if (!registered_) return 0;
  absl::StatusOr<casting::ModelMemoryUsage> usage =
      casting::TrackingAllocator::Installed()->GetModelUsage(id_);
  return usage.ok() ? usage->peak_bytes : 0;
}

// ---------------------------------------------------------------------------
// BatchingServedModel::Impl

class BatchingServedModel::Impl {
 public:
  Impl(inference::ModelConfig config, std::shared_ptr<models::Model> model,
       std::unique_ptr<TrackedModelId> tracked_id, int intra_op_threads,
       std::shared_ptr<const models::Cancellation> cancellation)
      : tracked_id_(std::move(tracked_id)),
        model_(std::move(model)),
        config_(std::move(config)),
        settings_(SettingsFromConfig(config_, intra_op_threads)),
        cancellation_(std::move(cancellation)) {}

  // Starts the instance threads and the reaper; each holds `self`.
  void Start(const std::shared_ptr<Impl>& self);
  // Fails the queued requests, then joins the threads (detaching the
  // calling one if it is a worker: it exits once its callback returns).
  void Stop();

  void Enqueue(InferenceRequest request,
               std::function<void(InferenceResult)> done);
  void Infer(InferenceCall call, std::function<void(absl::Status)> done);
  absl::Status Warmup(const models::NamedTensors& inputs) const;

  const inference::ModelConfig& config() const { return config_; }
  const models::Model& model() const { return *model_; }
  int64_t pending_requests() const;
  ServedModelStatistics statistics() const;
  casting::Footprint footprint() const;
  ServedModelActivity activity() const;
  int64_t tracked_bytes() const {
    return tracked_id_ ? tracked_id_->live_bytes() : 0;
  }

 private:
  void InstanceLoop();
  void ReaperLoop();
  // Waits for the next batch; false once stopping. Requests that expired or
  // were cancelled meanwhile come back in `dropped`.
  bool NextBatch(std::vector<PendingPtr>* batch,
                 std::vector<Rejection>* dropped);
  BatchPlan PlanBatchLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeLocked(const BatchPlan& plan, std::vector<PendingPtr>* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropExpiredLocked(absl::Time now, std::vector<Rejection>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time EarliestDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsPreferred(int64_t items) const;

  void Execute(std::vector<PendingPtr> batch);
  // Sets `*peak_increase_bytes` to what the batch's allocations added to
  // the process's live bytes at their peak.
  absl::StatusOr<models::NamedTensors> RunBatch(
      const std::vector<PendingPtr>& batch, int64_t* peak_increase_bytes) const;
  void Reject(std::vector<Rejection> rejections);
  // Writes the response (InferenceRequest::write_response), counts the
  // request in the statistics, then runs `pending->done` with `result`.
  void Complete(PendingPtr pending, InferenceResult result, bool was_running);
  void RecordExecution(int64_t items, absl::Duration compute_duration,
                       int64_t peak_increase_bytes);

  // Declared first so that it is released last: the model's frees are
  // credited to it.
  const std::unique_ptr<TrackedModelId> tracked_id_;
  const std::shared_ptr<models::Model> model_;
  const inference::ModelConfig config_;
  const BatchSettings settings_;
  const std::shared_ptr<const models::Cancellation> cancellation_;

  mutable absl::Mutex mu_;
  std::deque<PendingPtr> queue_ ABSL_GUARDED_BY(mu_);
  // Changes whenever the queue does, so that waiting instances re-plan.
  uint64_t queue_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t running_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Written by Start and Stop only, which never run concurrently.
  std::vector<std::thread> threads_;

  ModelStatisticsRecorder recorder_;
};

void BatchingServedModel::Impl::Start(const std::shared_ptr<Impl>& self) {
  for (int i = 0; i < settings_.instance_count; ++i) {
    threads_.emplace_back([self] { self->InstanceLoop(); });
  }
  threads_.emplace_back([self] { self->ReaperLoop(); });
}

void BatchingServedModel::Impl::Stop() {
  std::vector<Rejection> queued;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (PendingPtr& pending : queue_) {
      queued.push_back({std::move(pending),
                        absl::UnavailableError(absl::StrCat(
                            "model ", config_.name(), " is unloading"))});
    }
    queue_.clear();
    ++queue_generation_;
  }
  Reject(std::move(queued));
  for (std::thread& thread : threads_) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else if (thread.joinable()) {
      thread.join();
    }
  }
}

void BatchingServedModel::Impl::Enqueue(
    InferenceRequest request, std::function<void(InferenceResult)> done) {
  // Checked where the request entered (Infer, or the caller's CheckInputs).
  ABSL_RAW_CHECK(&request.inputs.model() == model_.get(),
                 "inputs checked by another model");
  ABSL_RAW_CHECK(request.batch_size >= 1 &&
                     (settings_.max_batch_size <= 0 ||
                      request.batch_size <= settings_.max_batch_size),
                 "batch size outside [1, max_batch_size]");
  auto pending = std::make_unique<Pending>();
  pending->enqueue_time = absl::Now();
  pending->queue_deadline = std::min(
      request.deadline, pending->enqueue_time + settings_.queue_timeout);
  pending->done = std::move(done);
  pending->batch_size = request.batch_size;
  if (settings_.joins) {
    pending->batch_key = BatchKeyOf(request.inputs.tensors());
  }
  pending->request = std::make_unique<InferenceRequest>(std::move(request));
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError(
          absl::StrCat("model ", config_.name(), " is unloading"));
    } else if (static_cast<int64_t>(queue_.size()) >=
               settings_.max_queue_size) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("the queue of model ", config_.name(), " is full (",
                       settings_.max_queue_size, " requests)"));
    } else {
      queue_.push_back(std::move(pending));
      ++queue_generation_;
      return;
    }
  }
  std::vector<Rejection> rejected;
  rejected.push_back({std::move(pending), std::move(refused)});
  Reject(std::move(rejected));
}

void BatchingServedModel::Impl::Infer(InferenceCall call,
                                      std::function<void(absl::Status)> done) {
  const inference::ModelInferRequest* wire = call.request;
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(*wire, model_->inputs(), model_->outputs(),
                    settings_.max_batch_size);
  absl::StatusOr<models::CheckedInputs> checked =
      decoded.ok() ? model_->CheckLimits(std::move(decoded->inputs))
                   : decoded.status();
  if (!checked.ok()) {
    // Refused before it was queued: counted once, with no durations.
    recorder_.RecordRequest({checked.status().code()}, absl::Now());
    return done(checked.status());
  }
  InferenceRequest request(*std::move(checked));
  request.batch_size = decoded->batch_size;
  request.requested_outputs = decoded->requested_outputs;
  request.deadline = call.deadline;
  request.is_cancelled = std::move(call.is_cancelled);
  request.write_response =
      [this, wire, response = call.response,
       max_bytes = call.max_response_bytes,
       requested = std::move(decoded->requested_outputs)](
          const models::NamedTensors& outputs) {
        return FillResponseWithin(*wire, model_->outputs(), requested,
                                  outputs, max_bytes, response);
      };
  Enqueue(std::move(request), [done = std::move(done)](InferenceResult result) {
    done(result.outputs.status());
  });
}

void BatchingServedModel::Impl::InstanceLoop() {
  if (settings_.intra_op_threads > 0) {
    // LibTorch keeps the count per thread (OpenMP's and MKL's settings), but
    // sets a thread's from the last process-wide value when the thread first
    // asks for it: ask first (get_num_threads marks this thread initialized
    // inside LibTorch), then set this thread's own.
    (void)at::get_num_threads();
    at::set_num_threads(settings_.intra_op_threads);
  }
  for (;;) {
    std::vector<PendingPtr> batch;
    std::vector<Rejection> dropped;
    const bool keep_running = NextBatch(&batch, &dropped);
    Reject(std::move(dropped));
    if (!batch.empty()) Execute(std::move(batch));
    if (!keep_running) return;
  }
}

void BatchingServedModel::Impl::ReaperLoop() {
  for (;;) {
    std::vector<Rejection> dropped;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&has_work));
      const absl::Time wake = std::min(absl::Now() + kCancellationPollInterval,
                                       EarliestDeadlineLocked());
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
      if (stopping_) return;
      DropExpiredLocked(absl::Now(), &dropped);
    }
    Reject(std::move(dropped));
  }
}

bool BatchingServedModel::Impl::NextBatch(std::vector<PendingPtr>* batch,
                                          std::vector<Rejection>* dropped) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !queue_.empty();
    };
    mu_.Await(absl::Condition(&has_work));
    if (stopping_) return false;
    const absl::Time now = absl::Now();
    DropExpiredLocked(now, dropped);
    if (!dropped->empty()) return true;  // Answer those first.
    if (queue_.empty()) continue;
    const BatchPlan plan = PlanBatchLocked();
    const absl::Time flush_time =
        queue_.front()->enqueue_time + settings_.max_queue_delay;
    if (plan.ready || now >= flush_time) {
      TakeLocked(plan, batch);
      return true;
    }
    const uint64_t generation = queue_generation_;
    auto changed = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || queue_generation_ != generation;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), flush_time);
  }
}

bool BatchingServedModel::Impl::IsPreferred(int64_t items) const {
  const std::vector<int64_t>& sizes = settings_.preferred_batch_sizes;
  return std::find(sizes.begin(), sizes.end(), items) != sizes.end();
}

BatchPlan BatchingServedModel::Impl::PlanBatchLocked() const {
  BatchPlan plan;
  const Pending& oldest = *queue_.front();
  plan.indices.push_back(0);
  plan.items = oldest.batch_size;
  if (!settings_.joins) {
    plan.ready = true;
    return plan;
  }
  BatchPlan preferred;
  if (IsPreferred(plan.items)) preferred = plan;
  for (size_t i = 1; i < queue_.size() && plan.items < settings_.max_batch_size;
       ++i) {
    const Pending& candidate = *queue_[i];
    if (candidate.batch_key != oldest.batch_key ||
        plan.items + candidate.batch_size > settings_.max_batch_size) {
      continue;
    }
    plan.indices.push_back(i);
    plan.items += candidate.batch_size;
    if (IsPreferred(plan.items)) preferred = plan;
  }
  if (plan.items >= settings_.max_batch_size) {
    plan.ready = true;
    return plan;
  }
  // The largest preferred size formed runs now; otherwise wait for more
  // requests until the oldest has waited max_queue_delay.
  if (!preferred.indices.empty()) {
    preferred.ready = true;
    return preferred;
  }
  return plan;
}

void BatchingServedModel::Impl::TakeLocked(const BatchPlan& plan,
                                           std::vector<PendingPtr>* batch) {
  for (size_t index : plan.indices) {
    batch->push_back(std::move(queue_[index]));
  }
  // Indices ascend: erase from the back so the others stay valid.
  for (auto it = plan.indices.rbegin(); it != plan.indices.rend(); ++it) {
    queue_.erase(queue_.begin() + *it);
  }
  running_requests_ += static_cast<int64_t>(batch->size());
  ++queue_generation_;
}

void BatchingServedModel::Impl::DropExpiredLocked(
    absl::Time now, std::vector<Rejection>* dropped) {
  const size_t before = dropped->size();
  for (auto it = queue_.begin(); it != queue_.end();) {
    Pending& pending = **it;
    absl::Status status;
    if (now >= pending.queue_deadline) {
      status = absl::DeadlineExceededError(
          pending.queue_deadline < pending.request->deadline
              ? "the request's queue timeout passed while it was queued"
              : "the request's deadline passed while it was queued");
    } else if (pending.request->is_cancelled && pending.request->is_cancelled()) {
      status = absl::CancelledError("the request was cancelled while queued");
    }
    if (status.ok()) {
      ++it;
      continue;
    }
    dropped->push_back({std::move(*it), std::move(status)});
    it = queue_.erase(it);
  }
  if (dropped->size() != before) ++queue_generation_;
}

absl::Time BatchingServedModel::Impl::EarliestDeadlineLocked() const {
  absl::Time earliest = absl::InfiniteFuture();
  for (const PendingPtr& pending : queue_) {
    earliest = std::min(earliest, pending->queue_deadline);
  }
  return earliest;
}

void BatchingServedModel::Impl::Execute(std::vector<PendingPtr> batch) {
  const absl::Time start = absl::Now();
  int64_t items = 0;
  for (const PendingPtr& pending : batch) items += pending->batch_size;
  int64_t peak_increase_bytes = 0;
  absl::StatusOr<models::NamedTensors> outputs =
      RunBatch(batch, &peak_increase_bytes);
  if (!outputs.ok() && batch.size() > 1 &&
      absl::IsInvalidArgument(outputs.status())) {
    // One bad request must not fail the others: run each alone.
    for (PendingPtr& pending : batch) {
      std::vector<PendingPtr> alone;
      alone.push_back(std::move(pending));
      Execute(std::move(alone));
    }
    return;
  }
  const absl::Time end = absl::Now();
  RecordExecution(items, end - start, peak_increase_bytes);
  int64_t offset = 0;
  for (PendingPtr& pending : batch) {
    InferenceResult result;
    result.queue_duration = start - pending->enqueue_time;
    result.compute_duration = end - start;
    result.executed_batch_size = items;
    if (outputs.ok()) {
      result.outputs =
          SliceOutputs(*outputs, batch.size() == 1, offset, pending->batch_size,
                       items, pending->request->requested_outputs);
    } else {
      result.outputs = outputs.status();
    }
    offset += pending->batch_size;
    Complete(std::move(pending), std::move(result), /*was_running=*/true);
  }
}

absl::StatusOr<models::NamedTensors> BatchingServedModel::Impl::RunBatch(
    const std::vector<PendingPtr>& batch, int64_t* peak_increase_bytes) const {
  casting::ScopedModelTag tag(tracked_id_ ? tracked_id_->id() : "");
  casting::PeakScope peak;
  absl::StatusOr<models::NamedTensors> outputs;
  if (batch.size() == 1) {
    outputs = model_->Run(batch.front()->request->inputs, cancellation_.get());
  } else {
    absl::StatusOr<models::CheckedInputs> joined = Concatenate(batch);
    outputs = joined.ok() ? model_->Run(*joined, cancellation_.get())
                          : joined.status();
  }
  peak.Stop();
  *peak_increase_bytes = peak.peak_increase_bytes();
  return outputs;
}

absl::Status BatchingServedModel::Impl::Warmup(
    const models::NamedTensors& inputs) const {
  casting::ScopedModelTag tag(tracked_id_ ? tracked_id_->id() : "");
  return model_->Forward(inputs, cancellation_.get()).status();
}

void BatchingServedModel::Impl::Reject(std::vector<Rejection> rejections) {
  const absl::Time now = absl::Now();
  for (Rejection& rejection : rejections) {
    InferenceResult result;
    result.outputs = std::move(rejection.status);
    result.queue_duration = now - rejection.pending->enqueue_time;
    Complete(std::move(rejection.pending), std::move(result),
             /*was_running=*/false);
  }
}

void BatchingServedModel::Impl::Complete(PendingPtr pending,
                                         InferenceResult result,
                                         bool was_running) {
  if (result.outputs.ok() && pending->request->write_response) {
    absl::Status written = pending->request->write_response(*result.outputs);
    if (!written.ok()) result.outputs = std::move(written);
  }
  const absl::Time now = absl::Now();
  recorder_.RecordRequest(
      {result.outputs.status().code(), pending->batch_size,
       result.queue_duration, result.compute_duration,
       now - pending->enqueue_time},
      now);
  // `done` may drop the last reference to the served model; `this` stays
  // alive through the calling thread's own reference.
  std::function<void(InferenceResult)> done = std::move(pending->done);
  pending.reset();
  done(std::move(result));
  // Only once the callback and what it captured (possibly the model) are gone
  // does the request stop counting as pending: an Unload waiting for no
  // pending requests then frees the model's memory before it returns.
  done = nullptr;
  if (was_running) {
    absl::MutexLock lock(&mu_);
    --running_requests_;
  }
}

void BatchingServedModel::Impl::RecordExecution(int64_t items,
                                                absl::Duration compute_duration,
                                                int64_t peak_increase_bytes) {
  recorder_.RecordBatch(items, compute_duration, peak_increase_bytes);
}

int64_t BatchingServedModel::Impl::pending_requests() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size()) + running_requests_;
}

ServedModelStatistics BatchingServedModel::Impl::statistics() const {
  return recorder_.snapshot();
}

casting::Footprint BatchingServedModel::Impl::footprint() const {
  return SumOverWeights<casting::Footprint>(
      model_->root(),
      [](const casting::Weight& weight) { return weight.footprint(); });
}

ServedModelActivity BatchingServedModel::Impl::activity() const {
  const casting::WeightActivity weights =
      SumOverWeights<casting::WeightActivity>(
          model_->root(),
          [](const casting::Weight& weight) { return weight.activity(); });
  ServedModelActivity activity;
  activity.storage = {weights.storage_materializations, weights.storage_bytes,
                      weights.storage_time};
  activity.compute = {weights.compute_materializations, weights.compute_bytes,
                      weights.compute_time};
  activity.transient_compute_bytes = weights.transient_compute_bytes;
  activity.prefetch = model_->prefetch_counts();
  activity.peak_tracked_bytes = tracked_id_ ? tracked_id_->peak_bytes() : 0;
  return activity;
}

// ---------------------------------------------------------------------------
// BatchingServedModel

int InstanceCount(const inference::ModelConfig& config) {
  if (config.instance_group_size() == 0) return 1;
  int64_t count = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    count += std::max(group.count(), 1);
  }
  return static_cast<int>(
      std::min<int64_t>(count, std::numeric_limits<int>::max()));
}

absl::StatusOr<std::unique_ptr<BatchingServedModel>>
BatchingServedModel::Create(
    inference::ModelConfig config, std::shared_ptr<models::Model> model,
    std::unique_ptr<TrackedModelId> tracked_id, int intra_op_threads,
    std::shared_ptr<const models::Cancellation> cancellation) {
  if (model == nullptr) {
    return absl::InvalidArgumentError("BatchingServedModel needs a model");
  }
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size ", config.max_batch_size(), " is negative"));
  }
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group count ", group.count(), " is negative"));
    }
  }
  absl::StatusOr<std::vector<TensorSpec>> wire_inputs =
      WireSpecs(model->inputs());
  if (!wire_inputs.ok()) return wire_inputs.status();
  absl::StatusOr<std::vector<TensorSpec>> wire_outputs =
      WireSpecs(model->outputs());
  if (!wire_outputs.ok()) return wire_outputs.status();
  auto impl = std::make_shared<Impl>(std::move(config), std::move(model),
                                     std::move(tracked_id), intra_op_threads,
                                     std::move(cancellation));
  impl->Start(impl);
  return absl::WrapUnique(new BatchingServedModel(
      std::move(impl), *std::move(wire_inputs), *std::move(wire_outputs)));
}

BatchingServedModel::BatchingServedModel(std::shared_ptr<Impl> impl,
                                         std::vector<TensorSpec> wire_inputs,
                                         std::vector<TensorSpec> wire_outputs)
    : impl_(std::move(impl)),
      wire_inputs_(std::move(wire_inputs)),
      wire_outputs_(std::move(wire_outputs)) {}

BatchingServedModel::~BatchingServedModel() { impl_->Stop(); }

absl::Status BatchingServedModel::Warmup(const models::NamedTensors& inputs) {
  return impl_->Warmup(inputs);
}

const models::Model& BatchingServedModel::model() const {
  return impl_->model();
}

void BatchingServedModel::Enqueue(InferenceRequest request,
                                  std::function<void(InferenceResult)> done) {
  impl_->Enqueue(std::move(request), std::move(done));
}

const inference::ModelConfig& BatchingServedModel::config() const {
  return impl_->config();
}

const std::vector<TensorSpec>& BatchingServedModel::inputs() const {
  return wire_inputs_;
}

const std::vector<TensorSpec>& BatchingServedModel::outputs() const {
  return wire_outputs_;
}

void BatchingServedModel::Infer(InferenceCall call,
                                std::function<void(absl::Status)> done) {
  impl_->Infer(std::move(call), std::move(done));
}

int64_t BatchingServedModel::pending_requests() const {
  return impl_->pending_requests();
}

ServedModelStatistics BatchingServedModel::statistics() const {
  return impl_->statistics();
}

casting::Footprint BatchingServedModel::footprint() const {
  return impl_->footprint();
}

int64_t BatchingServedModel::tracked_bytes() const {
  return impl_->tracked_bytes();
}

ServedModelActivity BatchingServedModel::activity() const {
  return impl_->activity();
}

}  // namespace castserve
