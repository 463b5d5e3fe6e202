#ifndef CASTSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
#define CASTSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_

#include "proto/inference.grpc.pb.h"
#include "server/core/inference_core.h"

namespace castserve {

// The KServe v2 gRPC service and the Triton extensions tooling calls, on
// gRPC's callback API. Each handler is one line: it hands the call's
// metadata, deadline and cancellation (a CallContext) with the messages to
// the InferenceCore, which the REST port shares, and finishes the reactor
// with the converted status (status_conversion.h). RPCs not overridden here
// answer UNIMPLEMENTED. The operations' contracts are InferenceCore's.
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
  // `core` (not owned) must outlive the service.
  explicit InferenceService(InferenceCore* core);

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

  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;

  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;

  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;

  grpc::ServerUnaryReactor* ModelInfer(
      grpc::CallbackServerContext* context,
      const inference::ModelInferRequest* request,
      inference::ModelInferResponse* response) override;

  // One response per request, in request order; a failed request answers
  // with error_message and the stream goes on.
  grpc::ServerBidiReactor<inference::ModelInferRequest,
                          inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;

  grpc::ServerUnaryReactor* RepositoryIndex(
      grpc::CallbackServerContext* context,
      const inference::RepositoryIndexRequest* request,
      inference::RepositoryIndexResponse* response) override;

  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;

  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context,
      const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;

 private:
  InferenceCore* const core_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
