#include "server/inference_service.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/log.h"
#include "server/model_catalog.h"
#include "server/serving_metrics.h"
#include "server/status_conversion.h"
#include "server/version.h"

namespace castserve {
namespace {

using ModelOrStatus = absl::StatusOr<std::shared_ptr<ServedModel>>;

// Requests of one stream in flight at once before reading pauses.
constexpr size_t kMaxStreamRequestsInFlight = 64;

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const auto call_deadline = context.deadline();
  return call_deadline == std::chrono::system_clock::time_point::max()
             ? absl::InfiniteFuture()
             : absl::FromChrono(call_deadline);
}

// The call's deadline, shortened by the request's "timeout" parameter
// (microseconds, Triton's reserved key; 0 means none). INVALID_ARGUMENT for
// a timeout that is negative or not an integer.
absl::StatusOr<absl::Time> RequestDeadline(
    const grpc::CallbackServerContext& context,
    const inference::ModelInferRequest& request) {
  absl::Time deadline = CallDeadline(context);
  auto timeout = request.parameters().find("timeout");
  if (timeout == request.parameters().end()) return deadline;
  const inference::InferParameter& value = timeout->second;
  int64_t microseconds = -1;
  if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    microseconds = value.int64_param();
  } else if (value.parameter_choice_case() ==
                 inference::InferParameter::kUint64Param &&
             value.uint64_param() <=
                 static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    microseconds = static_cast<int64_t>(value.uint64_param());
  }
  if (microseconds < 0) {
    return absl::InvalidArgumentError(
        "parameter 'timeout' must be a non-negative integer (int64_param: "
        "microseconds, 0 for none)");
  }
  if (microseconds > 0) {
    deadline =
        std::min(deadline, absl::Now() + absl::Microseconds(microseconds));
  }
  return deadline;
}

// Calls `then` with the READY model `name`: inline when it is READY now,
// otherwise on the executor, since a first-request load can take seconds
// and must not hold a gRPC thread.
void WithReadyModel(ModelManager* manager, casting::Executor* executor,
                    const std::string& name, const std::string& version,
                    absl::Time deadline,
                    std::function<void(ModelOrStatus)> then) {
  absl::StatusOr<ModelStatus> status = manager->Status(name);
  if (status.ok() && status->state == ModelState::kReady) {
    then(manager->GetReady(name, version, deadline));
    return;
  }
  executor->Schedule(
      [manager, name, version, deadline, then = std::move(then)] {
        then(manager->GetReady(name, version, deadline));
      });
}

// Lets a served model poll a call's cancellation after the call finished
// (then it reads as cancelled) without touching a freed context.
class CancellationGuard {
 public:
  explicit CancellationGuard(grpc::CallbackServerContext* context)
      : context_(context) {}

  bool IsCancelled() {
    absl::MutexLock lock(&mutex_);
    return context_ == nullptr || context_->IsCancelled();
  }
  void Release() {
    absl::MutexLock lock(&mutex_);
    context_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  grpc::CallbackServerContext* context_ ABSL_GUARDED_BY(mutex_);
};

// One inference, shared by ModelInfer and ModelStreamInfer: find the model,
// validate and convert the inputs, run, convert the outputs into `response`
// (on the model's worker thread, before the request is counted). The request
// counts once, as a success or a failure, whichever step refused it.
// `request` and `response` must stay alive until `done` runs (exactly once).
void RunInference(ModelManager* manager, casting::Executor* executor,
                  const inference::ModelInferRequest* request,
                  absl::StatusOr<absl::Time> request_deadline,
                  std::shared_ptr<CancellationGuard> guard,
                  int64_t max_response_bytes,
                  inference::ModelInferResponse* response,
                  std::function<void(absl::Status)> done) {
  if (!request_deadline.ok()) {
    UnroutedRequests::Global().Record(request_deadline.status().code());
    return done(request_deadline.status());
  }
  const absl::Time deadline = *request_deadline;
  auto run = [request, deadline, guard, max_response_bytes, response,
              done](ModelOrStatus model) mutable {
    if (!model.ok()) {
      UnroutedRequests::Global().Record(model.status().code());
      return done(model.status());
    }
    InferenceCall call;
    call.request = request;
    call.response = response;
    call.deadline = deadline;
    call.is_cancelled = [guard] { return guard->IsCancelled(); };
    call.max_response_bytes = max_response_bytes;
    // The served model validates the request, runs it and fills `response`.
    (*model)->Infer(std::move(call),
                    [model = *model, done](absl::Status status) {
                      done(std::move(status));
                    });
  };
  WithReadyModel(manager, executor, request->model_name(),
                 request->model_version(), deadline, std::move(run));
}

// A stream refused before it started (no token): finishes at once.
class RefusedStream
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  explicit RefusedStream(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

// ModelStreamInferResponse's field tag and length around its infer_response,
// rounded up.
constexpr int64_t kStreamEnvelopeBytes = 16;

// ModelStreamInfer: reads go on while earlier requests run; responses are
// written one at a time in request order. Finishes (OK) once the client is
// done writing and every response went out, or a write failed and nothing
// is running any more.
class StreamInferReactor
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // Each response is at most `max_message_bytes` with its envelope.
  StreamInferReactor(ModelManager* manager, casting::Executor* executor,
                     grpc::CallbackServerContext* context,
                     int64_t max_message_bytes)
      : manager_(manager),
        executor_(executor),
        max_response_bytes_(max_message_bytes - kStreamEnvelopeBytes),
        context_(context),
        guard_(std::make_shared<CancellationGuard>(context)) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Next next;
      {
        absl::MutexLock lock(&mutex_);
        reads_done_ = true;
        next = DecideLocked();
      }
      return Perform(next);
    }
    auto slot = std::make_unique<Slot>();
    slot->request = std::move(incoming_);
    Slot* raw = slot.get();
    bool read_more;
    {
      absl::MutexLock lock(&mutex_);
      slots_.push_back(std::move(slot));
      ++in_flight_;
      read_more = slots_.size() < kMaxStreamRequestsInFlight;
      read_paused_ = !read_more;
    }
    if (read_more) StartRead(&incoming_);
    RunInference(
        manager_, executor_, &raw->request,
        RequestDeadline(*context_, raw->request), guard_, max_response_bytes_,
        raw->response.mutable_infer_response(),
        [this, raw](absl::Status status) { OnInferDone(raw, status); });
  }

  void OnWriteDone(bool ok) override {
    bool resume_read = false;
    Next next;
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      slots_.pop_front();
      if (!ok) write_failed_ = true;
      if (read_paused_ && !write_failed_ &&
          slots_.size() < kMaxStreamRequestsInFlight) {
        read_paused_ = false;
        resume_read = true;
      }
      next = DecideLocked();
    }
    if (resume_read) StartRead(&incoming_);
    Perform(next);
  }

  void OnDone() override {
    guard_->Release();
    delete this;
  }

 private:
  struct Slot {
    inference::ModelInferRequest request;
    inference::ModelStreamInferResponse response;
    bool done = false;
  };

  void OnInferDone(Slot* slot, const absl::Status& status) {
    if (!status.ok()) {
      slot->response.set_error_message(std::string(status.message()));
      inference::ModelInferResponse* response =
          slot->response.mutable_infer_response();
      response->Clear();
      response->set_model_name(slot->request.model_name());
      response->set_id(slot->request.id());
    }
    // The update and the decision share one critical section: once
    // in_flight_ may read 0, another thread may finish the call and the
    // reactor may be deleted, so this worker thread must not touch it again
    // except to start what it decided.
    Next next;
    {
      absl::MutexLock lock(&mutex_);
      slot->done = true;
      --in_flight_;
      next = DecideLocked();
    }
    Perform(next);
  }

  // What to start next: the next write, or finishing the call.
  struct Next {
    inference::ModelStreamInferResponse* write = nullptr;
    bool finish = false;
  };

  // Decides the next write or the end of the call as the state allows.
  // Called under the lock together with the state change that prompts it;
  // the operation is started outside it (Perform): a completion may run
  // inline and take the lock again.
  Next DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    Next next;
    if (!writing_ && !write_failed_ && !slots_.empty() &&
        slots_.front()->done) {
      writing_ = true;
      next.write = &slots_.front()->response;
    }
    if (!finished_ && !writing_ && in_flight_ == 0 &&
        ((reads_done_ && slots_.empty()) || write_failed_)) {
      finished_ = true;
      next.finish = true;
    }
    return next;
  }

  void Perform(const Next& next) {
    if (next.write != nullptr) StartWrite(next.write);
    if (next.finish) Finish(grpc::Status::OK);
  }

  ModelManager* const manager_;
  casting::Executor* const executor_;
  const int64_t max_response_bytes_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<CancellationGuard> guard_;
  // Written by gRPC between StartRead and OnReadDone only.
  inference::ModelInferRequest incoming_;

  absl::Mutex mutex_;
  std::deque<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mutex_);
  int in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mutex_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mutex_) = false;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

void FillTensorMetadata(
    const std::vector<TensorSpec>& specs,
    google::protobuf::RepeatedPtrField<
        inference::ModelMetadataResponse::TensorMetadata>* metadata) {
  for (const TensorSpec& spec : specs) {
    auto* tensor = metadata->Add();
    tensor->set_name(spec.name);
    tensor->set_datatype(spec.datatype);
    for (int64_t dim : spec.shape) tensor->add_shape(dim);
  }
}

void SetDuration(uint64_t count, absl::Duration duration,
                 inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(static_cast<uint64_t>(absl::ToInt64Nanoseconds(duration)));
}

void FillStatistics(const ServedModel& model, inference::ModelStatistics* out) {
  const ServedModelStatistics stats = model.statistics();
  out->set_last_inference(stats.last_inference_ms);
  out->set_inference_count(stats.inference_count);
  out->set_execution_count(stats.execution_count);
  inference::InferStatistics* infer = out->mutable_inference_stats();
  SetDuration(stats.success_count, stats.success_duration,
              infer->mutable_success());
  SetDuration(stats.fail_count, stats.fail_duration, infer->mutable_fail());
  SetDuration(stats.success_count, stats.queue_duration,
              infer->mutable_queue());
  // castserve times the forward as a whole: input and output conversion
  // are inside compute_infer.
  SetDuration(stats.success_count, absl::ZeroDuration(),
              infer->mutable_compute_input());
  SetDuration(stats.success_count, stats.compute_duration,
              infer->mutable_compute_infer());
  SetDuration(stats.success_count, absl::ZeroDuration(),
              infer->mutable_compute_output());
  for (const auto& [batch_size, count_and_duration] : stats.batches) {
    inference::InferBatchStatistics* batch = out->add_batch_stats();
    batch->set_batch_size(batch_size);
    const uint64_t count = count_and_duration.first;
    SetDuration(count, absl::ZeroDuration(), batch->mutable_compute_input());
    SetDuration(count, count_and_duration.second,
                batch->mutable_compute_infer());
    SetDuration(count, absl::ZeroDuration(), batch->mutable_compute_output());
  }
  inference::MemoryUsage* memory = out->add_memory_usage();
  memory->set_type("CPU");
  memory->set_id(0);
  const casting::Device device = model.device();
  if (device.is_cuda()) {
    // The model's bytes on its GPU (casting/device_model_memory.h); the CPU
    // entry is what the tracking allocator holds for it besides.
    const int64_t device_bytes = model.device_bytes();
    memory->set_byte_size(
        static_cast<uint64_t>(model.tracked_bytes() - device_bytes));
    inference::MemoryUsage* gpu = out->add_memory_usage();
    gpu->set_type("GPU");
    gpu->set_id(device.index());
    gpu->set_byte_size(static_cast<uint64_t>(device_bytes));
    return;
  }
  // The tracking allocator's bytes and the weights' owned bytes overlap
  // (weights made under the model's tag count in both): the larger one is
  // the measure, as the ModelManager's budget uses it.
  memory->set_byte_size(static_cast<uint64_t>(
      std::max(model.tracked_bytes(), model.footprint().owned_bytes())));
}

absl::StatusOr<std::optional<inference::ModelConfig>> ConfigOverride(
    const inference::RepositoryModelLoadRequest& request) {
  std::optional<inference::ModelConfig> config;
  for (const auto& [key, value] : request.parameters()) {
    if (absl::StartsWith(key, "file:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", key, "': castserve does not accept model files"));
    }
    if (key != "config") continue;
    if (value.parameter_choice_case() !=
        inference::ModelRepositoryParameter::kStringParam) {
      return absl::InvalidArgumentError(
          "parameter 'config' must be a string (ModelConfig as JSON)");
    }
    inference::ModelConfig parsed;
    auto status = google::protobuf::util::JsonStringToMessage(
        value.string_param(), &parsed);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'config' is not a ModelConfig in JSON: ",
                       status.message().as_string()));
    }
    config = std::move(parsed);
  }
  return config;
}

}  // namespace

InferenceService::InferenceService(const std::atomic<bool>* ready,
                                   ModelManager* manager,
                                   int64_t max_response_bytes,
                                   TokenAuthenticator* auth,
                                   casting::Executor* executor)
    : ready_(ready),
      manager_(manager),
      executor_(executor != nullptr ? executor : &casting::Executor::Default()),
      max_response_bytes_(max_response_bytes),
      auth_(auth) {}

absl::Status InferenceService::Authorize(
    const grpc::CallbackServerContext& context, Scope scope) const {
  if (auth_ == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto header = metadata.find("authorization");
  return auth_->Authorize(
      header == metadata.end()
          ? absl::string_view()
          : absl::string_view(header->second.data(), header->second.size()),
      scope);
}

grpc::ServerUnaryReactor* InferenceService::Refuse(
    grpc::CallbackServerContext* context, Scope scope) const {
  absl::Status allowed = Authorize(*context, scope);
  return allowed.ok() ? nullptr : Finish(context, allowed);
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* /*request*/,
    inference::ServerLiveResponse* response) {
  // Answering at all is the proof of liveness.
  response->set_live(true);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* /*request*/,
    inference::ServerReadyResponse* response) {
  response->set_ready(ready_->load());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  if (auto* refused = Refuse(context, Scope::kInfer)) return refused;
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  // Only the extensions whose RPCs castserve implements.
  for (const char* extension :
       {"model_repository", "model_configuration", "statistics"}) {
    response->add_extensions(extension);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  if (auto* refused = Refuse(context, Scope::kInfer)) return refused;
  absl::StatusOr<ModelStatus> status = manager_->Status(request->name());
  response->set_ready(
      status.ok() && status->state == ModelState::kReady &&
      CheckModelVersion(request->name(), request->version()).ok());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  if (auto* refused = Refuse(context, Scope::kInfer)) return refused;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WithReadyModel(
      manager_, executor_, request->name(), request->version(),
      CallDeadline(*context),
      [reactor, request, response](ModelOrStatus model) {
        if (!model.ok()) return reactor->Finish(ToGrpcStatus(model.status()));
        const inference::ModelConfig& config = (*model)->config();
        response->set_name(request->name());
        response->add_versions("1");
        response->set_platform(config.platform().empty() ? kDefaultPlatform
                                                         : config.platform());
        FillTensorMetadata((*model)->inputs(), response->mutable_inputs());
        FillTensorMetadata((*model)->outputs(), response->mutable_outputs());
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context,
    const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  if (auto* refused = Refuse(context, Scope::kInfer)) return refused;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  WithReadyModel(manager_, executor_, request->name(), request->version(),
                 CallDeadline(*context),
                 [reactor, response](ModelOrStatus model) {
                   if (!model.ok()) {
                     return reactor->Finish(ToGrpcStatus(model.status()));
                   }
                   inference::ModelConfig* config = response->mutable_config();
                   *config = (*model)->config();
                   if (config->platform().empty()) {
                     config->set_platform(kDefaultPlatform);
                   }
                   if (config->backend().empty()) {
                     config->set_backend(kDefaultBackend);
                   }
                   reactor->Finish(grpc::Status::OK);
                 });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context,
    const inference::ModelInferRequest* request,
    inference::ModelInferResponse* response) {
  if (absl::Status allowed = Authorize(*context, Scope::kInfer);
      !allowed.ok()) {
    // Counted like every other failed inference request.
    UnroutedRequests::Global().Record(allowed.code());
    return Finish(context, allowed);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto guard = std::make_shared<CancellationGuard>(context);
  RunInference(manager_, executor_, request,
               RequestDeadline(*context, *request), guard, max_response_bytes_,
               response, [reactor, guard](absl::Status status) {
                 guard->Release();
                 reactor->Finish(ToGrpcStatus(status));
               });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest,
                        inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  if (absl::Status allowed = Authorize(*context, Scope::kInfer);
      !allowed.ok()) {
    UnroutedRequests::Global().Record(allowed.code());
    return new RefusedStream(allowed);
  }
  return new StreamInferReactor(manager_, executor_, context,
                                max_response_bytes_);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  if (auto* refused = Refuse(context, Scope::kInfer)) return refused;
  if (absl::Status status =
          CheckModelVersion(request->name(), request->version());
      !status.ok()) {
    return Finish(context, status);
  }
  if (!request->name().empty()) {
    absl::StatusOr<ModelStatus> status = manager_->Status(request->name());
    if (!status.ok()) return Finish(context, status.status());
  }
  bool found = false;
  for (const auto& [name, model] : manager_->ReadyModels()) {
    if (!request->name().empty() && name != request->name()) continue;
    inference::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(name);
    stats->set_version("1");
    FillStatistics(*model, stats);
    found = true;
  }
  if (!request->name().empty() && !found) {
    // Known but not loaded: nothing has run yet.
    inference::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(request->name());
    stats->set_version("1");
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context,
    const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  if (auto* refused = Refuse(context, Scope::kAdmin)) return refused;
  for (const ModelStatus& status : manager_->Index()) {
    if (request->ready() && status.state != ModelState::kReady) continue;
    auto* model = response->add_models();
    model->set_name(status.name);
    model->set_version(status.version);
    model->set_state(ModelStateName(status.state));
    model->set_reason(status.reason);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* /*response*/) {
  if (auto* refused = Refuse(context, Scope::kAdmin)) return refused;
  absl::StatusOr<std::optional<inference::ModelConfig>> config =
      ConfigOverride(*request);
  if (!config.ok()) return Finish(context, config.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  executor_->Schedule([manager = manager_, reactor,
                       name = request->model_name(),
                       config = *std::move(config)]() mutable {
    reactor->Finish(ToGrpcStatus(manager->Load(name, std::move(config))));
  });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* /*response*/) {
  if (auto* refused = Refuse(context, Scope::kAdmin)) return refused;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  executor_->Schedule(
      [manager = manager_, reactor, name = request->model_name()] {
        reactor->Finish(ToGrpcStatus(manager->Unload(name)));
      });
  return reactor;
}

}  // namespace castserve
