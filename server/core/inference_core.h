// InferenceCore: the KServe v2 operations and Triton's extensions, behind
// every protocol. The gRPC service (inference_service.h) and the REST
// service (rest_service.h) only convert their wire form into these
// protobuf messages and back; authorization, deadlines, validation,
// statistics and the work itself happen here, once.
//
// gRPC-free and LibTorch-free: the messages are the protobuf ones of
// proto/inference.proto, which both protocols map onto.
#ifndef CASTSERVE_SERVER_CORE_INFERENCE_CORE_H_
#define CASTSERVE_SERVER_CORE_INFERENCE_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "platform/executor.h"
#include "proto/inference.pb.h"
#include "server/core/auth.h"
#include "server/lifecycle/model_manager.h"

namespace castserve {

// What a call brings besides its message, whatever the protocol.
struct CallContext {
  // "Bearer <token>" from gRPC's `authorization` metadata or HTTP's
  // Authorization header; empty when the caller sent none.
  std::string authorization;
  // The call's own deadline (gRPC's; a REST call has none of its own).
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller has gone away. May be null. Polled from other
  // threads while the call is queued or about to run, and possibly after
  // the call's `done` ran (it must then still be callable).
  std::function<bool()> is_cancelled;
  // Bytes the protocol wraps around an inference response (a stream
  // message's envelope): the response may use the limit less these.
  int64_t response_envelope_bytes = 0;
  // Set by a streaming protocol, null for a unary call: a decoupled
  // (generation) model hands it every response before the final one, in
  // order, from its step thread. It must not block (the protocol queues the
  // write). The final response goes into the call's `response` as always.
  std::function<void(inference::ModelInferResponse)> partial_response;
};

// How an operation ends: exactly once, inline or on another thread.
using CallDone = std::function<void(absl::Status)>;

class InferenceCore;
// One of InferenceCore's operations, for protocol code that serves them
// all the same way.
template <typename Request, typename Response>
using CoreOperation = void (InferenceCore::*)(CallContext, const Request&,
                                              Response*, CallDone);

// Every operation takes the caller's `request` and `response`, which must
// stay alive until `done` has run, and calls `done` exactly once: inline
// when it can answer at once, otherwise from the executor or a model's
// worker (a first-request load, a repository call and an inference never
// hold the caller's thread). Scopes (server/core/auth.h): none for ServerLive
// and ServerReady, `admin` for the repository operations, `infer` for the
// others; UNAUTHENTICATED / PERMISSION_DENIED otherwise.
//
// Thread-safe. Everything handed to the constructor must outlive the core
// and every call still running on it.
class InferenceCore {
 public:
  // `ready` says whether the server takes requests. An inference response
  // larger than `max_response_bytes` (--max-message-bytes) fails with
  // RESOURCE_EXHAUSTED naming both sizes. `auth` may be null (no tokens
  // needed). `executor` may be null: platform::Executor::Default(). The
  // `timeout` request parameter counts from `clock`'s now (not owned).
  InferenceCore(const std::atomic<bool>* ready, ModelManager* manager,
                int64_t max_response_bytes, TokenAuthenticator* auth,
                platform::Executor* executor,
                platform::Clock* clock = &platform::Clock::Real());

  // OK without tokens configured, else TokenAuthenticator::Authorize of
  // `call.authorization`. Every operation checks it itself; a protocol may
  // call it earlier too (REST, before it reads a request body).
  absl::Status Authorize(const CallContext& call, Scope scope) const;
  // Authorize for `infer`, counting a refusal in UnroutedRequests as every
  // failed inference request counts once.
  absl::Status AuthorizeInference(const CallContext& call) const;
  // Counts an inference request a protocol refused before it became a
  // ModelInferRequest (a body that does not decode) in UnroutedRequests;
  // returns `status`.
  absl::Status RefuseInference(absl::Status status) const;

  void ServerLive(CallContext call, const inference::ServerLiveRequest& request,
                  inference::ServerLiveResponse* response, CallDone done);
  void ServerReady(CallContext call,
                   const inference::ServerReadyRequest& request,
                   inference::ServerReadyResponse* response, CallDone done);
  // Name, version and the extensions castserve implements.
  void ServerMetadata(CallContext call,
                      const inference::ServerMetadataRequest& request,
                      inference::ServerMetadataResponse* response,
                      CallDone done);
  // READY or not; an unknown model is not ready (no error), as in Triton.
  void ModelReady(CallContext call, const inference::ModelReadyRequest& request,
                  inference::ModelReadyResponse* response, CallDone done);
  // Metadata and config need the model: a first_request model loads here.
  void ModelMetadata(CallContext call,
                     const inference::ModelMetadataRequest& request,
                     inference::ModelMetadataResponse* response, CallDone done);
  void ModelConfig(CallContext call,
                   const inference::ModelConfigRequest& request,
                   inference::ModelConfigResponse* response, CallDone done);
  // Deadline: the call's, shortened by a "timeout" request parameter
  // (microseconds). Cancellation: the call's, also while queued. Every
  // request counts once in the statistics and metrics, whichever step
  // refused it: against its model once one was found (ServedModel::Infer
  // validates and counts it), otherwise in UnroutedRequests.
  void ModelInfer(CallContext call, const inference::ModelInferRequest& request,
                  inference::ModelInferResponse* response, CallDone done);
  // READY models only (or the named one, zeros if it is not loaded).
  void ModelStatistics(CallContext call,
                       const inference::ModelStatisticsRequest& request,
                       inference::ModelStatisticsResponse* response,
                       CallDone done);
  // The effective configs of the READY models, by name (the OpenAI API's
  // model list). Scope `infer`.
  void ReadyModelConfigs(CallContext call,
                         std::vector<inference::ModelConfig>* configs,
                         CallDone done);
  void RepositoryIndex(CallContext call,
                       const inference::RepositoryIndexRequest& request,
                       inference::RepositoryIndexResponse* response,
                       CallDone done);
  // Parameter "config" (string): a ModelConfig as JSON, used instead of the
  // model's config.pbtxt. Parameter "tier" (string: hot, warm, cool): moves
  // the READY model to that memory tier without reloading it (loading it
  // first when it is not READY), returning once the move is done
  // (ModelManager::MoveTo); not together with "config". Other keys are
  // ignored except "file:*", which is rejected (castserve does not take
  // model files over the wire).
  void RepositoryModelLoad(CallContext call,
                           const inference::RepositoryModelLoadRequest& request,
                           inference::RepositoryModelLoadResponse* response,
                           CallDone done);
  void RepositoryModelUnload(
      CallContext call, const inference::RepositoryModelUnloadRequest& request,
      inference::RepositoryModelUnloadResponse* response, CallDone done);

 private:
  const std::atomic<bool>* const ready_;
  ModelManager* const manager_;
  platform::Executor* const executor_;
  const int64_t max_response_bytes_;
  TokenAuthenticator* const auth_;
  platform::Clock& clock_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_CORE_INFERENCE_CORE_H_
