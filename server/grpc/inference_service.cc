#include "server/grpc/inference_service.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/status_conversion.h"

namespace castserve {
namespace {

// Requests of one stream in flight at once before reading pauses.
constexpr size_t kMaxStreamRequestsInFlight = 64;

absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const auto call_deadline = context.deadline();
  return call_deadline == std::chrono::system_clock::time_point::max()
             ? absl::InfiniteFuture()
             : absl::FromChrono(call_deadline);
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

// The call's `authorization` metadata, deadline and cancellation.
CallContext CallFrom(const grpc::CallbackServerContext& context,
                     std::shared_ptr<CancellationGuard> guard) {
  CallContext call;
  const auto& metadata = context.client_metadata();
  if (auto header = metadata.find("authorization"); header != metadata.end()) {
    call.authorization.assign(header->second.data(), header->second.size());
  }
  call.deadline = CallDeadline(context);
  call.is_cancelled = [guard = std::move(guard)] {
    return guard->IsCancelled();
  };
  return call;
}

// A unary RPC: the core's operation, finishing the reactor when it is done.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Unary(InferenceCore* core,
                                CoreOperation<Request, Response> operation,
                                grpc::CallbackServerContext* context,
                                const Request* request, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto guard = std::make_shared<CancellationGuard>(context);
  (core->*operation)(CallFrom(*context, guard), *request, response,
                     [reactor, guard](absl::Status status) {
                       guard->Release();
                       reactor->Finish(ToGrpcStatus(status));
                     });
  return reactor;
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

// Partial responses (a decoupled model's tokens) of one stream queued for
// writing at most: a client that does not read cancels the sequence that
// would queue one more instead of growing the queue.
constexpr size_t kMaxQueuedPartialResponses = 1024;

// ModelStreamInfer: reads go on while earlier requests run; responses are
// written one at a time in request order, a decoupled model's partial
// responses of a request before its final one. Finishes (OK) once the client
// is done writing and every response went out, or a write failed and
// nothing is running any more.
class StreamInferReactor
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // Each response is at most --max-message-bytes with its envelope.
  StreamInferReactor(InferenceCore* core, grpc::CallbackServerContext* context)
      : core_(core),
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
    CallContext call = CallFrom(*context_, guard_);
    call.response_envelope_bytes = kStreamEnvelopeBytes;
    // Cancelled with the call, or when its partial responses overflow.
    call.is_cancelled = [guard = guard_, dropped = raw->dropped,
                         broken = broken_] {
      return dropped->load() || broken->load() || guard->IsCancelled();
    };
    call.partial_response = [this, raw](inference::ModelInferResponse part) {
      OnPartialResponse(raw, std::move(part));
    };
    core_->ModelInfer(
        std::move(call), raw->request, raw->response.mutable_infer_response(),
        [this, raw](absl::Status status) { OnInferDone(raw, status); });
  }

  void OnWriteDone(bool ok) override {
    bool resume_read = false;
    Next next;
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      Slot& front = *slots_.front();
      if (!front.partials.empty()) {
        front.partials.pop_front();
        --queued_partials_;
      } else {
        slots_.pop_front();
      }
      if (!ok) {
        write_failed_ = true;
        broken_->store(true);  // Nobody reads what is still running.
      }
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
    // Partial responses not yet written, oldest first; then `response`.
    std::deque<inference::ModelStreamInferResponse> partials;
    inference::ModelStreamInferResponse response;
    bool done = false;
    // Set when a partial response was dropped: the request is cancelled.
    // Shared: the model may poll it after the call ended.
    std::shared_ptr<std::atomic<bool>> dropped =
        std::make_shared<std::atomic<bool>>(false);
  };

  // Runs on the model's step thread, never blocking: queues the response
  // (or drops it and cancels the request when the queue is full).
  void OnPartialResponse(Slot* slot, inference::ModelInferResponse part) {
    Next next;
    {
      absl::MutexLock lock(&mutex_);
      if (write_failed_ || slot->dropped->load()) return;
      if (queued_partials_ >= kMaxQueuedPartialResponses) {
        slot->dropped->store(true);
        return;
      }
      ++queued_partials_;
      slot->partials.emplace_back();
      *slot->partials.back().mutable_infer_response() = std::move(part);
      next = DecideLocked();
    }
    Perform(next);
  }

  void OnInferDone(Slot* slot, const absl::Status& status) {
    if (!status.ok()) {
      slot->response.set_error_message(
          slot->dropped->load()
              ? std::string("the client did not read the stream's responses; "
                            "the request was cancelled")
              : std::string(status.message()));
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
    if (!writing_ && !write_failed_ && !slots_.empty()) {
      Slot& front = *slots_.front();
      if (!front.partials.empty()) {
        next.write = &front.partials.front();
      } else if (front.done) {
        next.write = &front.response;
      }
      writing_ = next.write != nullptr;
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

  InferenceCore* const core_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<CancellationGuard> guard_;
  // Set once a write failed; cancels the requests still running.
  const std::shared_ptr<std::atomic<bool>> broken_ =
      std::make_shared<std::atomic<bool>>(false);
  // Written by gRPC between StartRead and OnReadDone only.
  inference::ModelInferRequest incoming_;

  absl::Mutex mutex_;
  std::deque<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mutex_);
  size_t queued_partials_ ABSL_GUARDED_BY(mutex_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mutex_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mutex_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mutex_) = false;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace

InferenceService::InferenceService(InferenceCore* core) : core_(core) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  return Unary(core_, &InferenceCore::ServerLive, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  return Unary(core_, &InferenceCore::ServerReady, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  return Unary(core_, &InferenceCore::ServerMetadata, context, request,
               response);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  return Unary(core_, &InferenceCore::ModelReady, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Unary(core_, &InferenceCore::ModelMetadata, context, request,
               response);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context,
    const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Unary(core_, &InferenceCore::ModelConfig, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context,
    const inference::ModelInferRequest* request,
    inference::ModelInferResponse* response) {
  return Unary(core_, &InferenceCore::ModelInfer, context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Unary(core_, &InferenceCore::ModelStatistics, context, request,
               response);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context,
    const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  return Unary(core_, &InferenceCore::RepositoryIndex, context, request,
               response);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* response) {
  return Unary(core_, &InferenceCore::RepositoryModelLoad, context, request,
               response);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context,
    const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* response) {
  return Unary(core_, &InferenceCore::RepositoryModelUnload, context, request,
               response);
}

grpc::ServerBidiReactor<inference::ModelInferRequest,
                        inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  auto guard = std::make_shared<CancellationGuard>(context);
  absl::Status allowed = core_->AuthorizeInference(CallFrom(*context, guard));
  guard->Release();
  if (!allowed.ok()) return new RefusedStream(allowed);
  return new StreamInferReactor(core_, context);
}

}  // namespace castserve
