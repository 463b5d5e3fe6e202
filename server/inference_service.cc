#include "server/inference_service.h"

#include "server/version.h"

namespace castserve {
namespace {

grpc::ServerUnaryReactor* FinishOk(grpc::CallbackServerContext* context) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace

InferenceService::InferenceService(const std::atomic<bool>* ready)
    : ready_(ready) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* /*request*/,
    inference::ServerLiveResponse* response) {
  // Answering at all is the proof of liveness.
  response->set_live(true);
  return FinishOk(context);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* /*request*/,
    inference::ServerReadyResponse* response) {
  response->set_ready(ready_->load());
  return FinishOk(context);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  // Protocol extensions are announced here as their RPCs land; none yet.
  return FinishOk(context);
}

}  // namespace castserve
