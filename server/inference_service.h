#ifndef CASTSERVE_SERVER_INFERENCE_SERVICE_H_
#define CASTSERVE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>

#include "casting/executor.h"
#include "proto/inference.grpc.pb.h"
#include "server/auth.h"
#include "server/model_manager.h"

namespace castserve {

// The KServe v2 gRPC service and the Triton extensions tooling calls, on
// gRPC's callback API. Handlers are stateless and short: they validate,
// delegate to the ModelManager / ServedModel, and convert statuses at the
// edge (status_conversion.h). RPCs not overridden here answer UNIMPLEMENTED.
//
// No handler blocks a gRPC thread for long: a call that needs a model that
// is not READY yet (first-request load) or a repository load/unload runs on
// the executor and finishes from there; draining the executor after the
// gRPC server stopped finishes them all (Server::Shutdown).
//
// Thread-safe. The service must be destroyed only after the gRPC server has
// shut down and waited (every reactor finished).
class InferenceService final
    : public inference::GRPCInferenceService::CallbackService {
 public:
  // `ready` says whether the server takes requests. Both pointers are owned
  // by the caller and must outlive the service. An inference response
  // larger than `max_response_bytes` (the server's --max-message-bytes)
  // fails with RESOURCE_EXHAUSTED naming both sizes.
  // With `auth` (may be null; not owned, outlives the service), every RPC
  // but ServerLive and ServerReady needs a bearer token in the
  // `authorization` metadata: `admin` for the repository RPCs, `infer` for
  // the others (UNAUTHENTICATED / PERMISSION_DENIED otherwise).
  // `executor` (may be null: casting::Executor::Default(); not owned,
  // outlives the service) runs the calls that wait.
  InferenceService(const std::atomic<bool>* ready, ModelManager* manager,
                   int64_t max_response_bytes,
                   TokenAuthenticator* auth = nullptr,
                   casting::Executor* executor = nullptr);

  grpc::ServerUnaryReactor* ServerLive(
      grpc::CallbackServerContext* context,
      const inference::ServerLiveRequest* request,
      inference::ServerLiveResponse* response) override;

  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context,
      const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;

  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;

  // READY or not; an unknown model is not ready (no error), as in Triton.
  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;

  // Metadata and config need the model: a first_request model loads here.
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;

  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;

  // Deadline: the call's, shortened by a "timeout" request parameter
  // (microseconds). Cancellation: the call's, also while queued. Every
  // request counts once in the statistics and metrics, whichever step
  // refused it: against its model once one was found (ServedModel::Infer
  // validates and counts it), otherwise in UnroutedRequests.
  grpc::ServerUnaryReactor* ModelInfer(
      grpc::CallbackServerContext* context,
      const inference::ModelInferRequest* request,
      inference::ModelInferResponse* response) override;

  // One response per request, in request order; a failed request answers
  // with error_message and the stream goes on.
  grpc::ServerBidiReactor<inference::ModelInferRequest,
                          inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

  // READY models only (or the named one, zeros if it is not loaded).
  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;

  grpc::ServerUnaryReactor* RepositoryIndex(
      grpc::CallbackServerContext* context,
      const inference::RepositoryIndexRequest* request,
      inference::RepositoryIndexResponse* response) override;

  // Parameter "config" (string): a ModelConfig as JSON, used instead of the
  // model's config.pbtxt. Other keys are ignored except "file:*", which is
  // rejected (castserve does not take model files over the wire).
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;

  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;

 private:
  const std::atomic<bool>* ready_;
  ModelManager* manager_;
  casting::Executor* const executor_;
  const int64_t max_response_bytes_;
  TokenAuthenticator* const auth_;

  // OK without `auth_`, else TokenAuthenticator::Authorize of the call's
  // `authorization` metadata.
  absl::Status Authorize(const grpc::CallbackServerContext& context,
                         Scope scope) const;
  // Null when the call may go on; otherwise the reactor that finished it
  // with Authorize's status.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                   Scope scope) const;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_INFERENCE_SERVICE_H_
