#include "client/inference_client.h"

#include <grpcpp/grpcpp.h>

namespace castserve {
namespace {

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace

InferenceClient::InferenceClient(const std::string& url, absl::Duration timeout)
    : timeout_(timeout) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(url, grpc::InsecureChannelCredentials());
  inference_ = inference::GRPCInferenceService::NewStub(channel);
  health_ = grpc::health::v1::Health::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> InferenceClient::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  return context;
}

absl::StatusOr<bool> InferenceClient::ServerLive() {
  inference::ServerLiveResponse response;
  grpc::Status status =
      inference_->ServerLive(NewContext().get(), {}, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.live();
}

absl::StatusOr<bool> InferenceClient::ServerReady() {
  inference::ServerReadyResponse response;
  grpc::Status status =
      inference_->ServerReady(NewContext().get(), {}, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.ready();
}

absl::StatusOr<inference::ServerMetadataResponse>
InferenceClient::ServerMetadata() {
  inference::ServerMetadataResponse response;
  grpc::Status status =
      inference_->ServerMetadata(NewContext().get(), {}, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus>
InferenceClient::Health(const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health_->Check(NewContext().get(), request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.status();
}

}  // namespace castserve
