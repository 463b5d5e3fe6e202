#ifndef CASTSERVE_SERVER_INFERENCE_SERVICE_H_
#define CASTSERVE_SERVER_INFERENCE_SERVICE_H_

#include <atomic>

#include "proto/inference.grpc.pb.h"

namespace castserve {

// The KServe v2 gRPC service on gRPC's callback API. Handlers are stateless
// and short: they validate, delegate and convert. RPCs not overridden here
// answer UNIMPLEMENTED (gRPC's default for a callback service).
class InferenceService final
    : public inference::GRPCInferenceService::CallbackService {
 public:
  // `ready` says whether the server takes requests; it is owned by the caller
  // and must outlive the service.
  explicit InferenceService(const std::atomic<bool>* ready);

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

 private:
  const std::atomic<bool>* ready_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_INFERENCE_SERVICE_H_
