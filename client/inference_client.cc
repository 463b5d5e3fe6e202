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

absl::StatusOr<inference::ModelMetadataResponse> InferenceClient::ModelMetadata(
    const std::string& model) {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  inference::ModelMetadataResponse response;
  grpc::Status status =
      inference_->ModelMetadata(NewContext().get(), request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::StatusOr<inference::ModelConfigResponse> InferenceClient::ModelConfig(
    const std::string& model) {
  inference::ModelConfigRequest request;
  request.set_name(model);
  inference::ModelConfigResponse response;
  grpc::Status status =
      inference_->ModelConfig(NewContext().get(), request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::StatusOr<inference::ModelInferResponse> InferenceClient::ModelInfer(
    const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  grpc::Status status =
      inference_->ModelInfer(NewContext().get(), request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::Status InferenceClient::ModelStreamInfer(
    const inference::ModelInferRequest& request,
    const std::function<void(const inference::ModelInferResponse&)>&
        on_response) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  auto stream = inference_->ModelStreamInfer(context.get());
  if (!stream->Write(request)) return ToAbsl(stream->Finish());
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  absl::Status error;
  while (stream->Read(&response)) {
    if (!response.error_message().empty()) {
      // The first error ends the call; the rest of the stream is drained.
      if (error.ok()) error = absl::UnknownError(response.error_message());
      continue;
    }
    if (error.ok()) on_response(response.infer_response());
  }
  grpc::Status status = stream->Finish();
  if (!status.ok()) return ToAbsl(status);
  return error;
}

absl::StatusOr<inference::ModelStatisticsResponse>
InferenceClient::ModelStatistics(const std::string& model) {
  inference::ModelStatisticsRequest request;
  request.set_name(model);
  inference::ModelStatisticsResponse response;
  grpc::Status status =
      inference_->ModelStatistics(NewContext().get(), request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::StatusOr<inference::RepositoryIndexResponse>
InferenceClient::RepositoryIndex() {
  inference::RepositoryIndexResponse response;
  grpc::Status status =
      inference_->RepositoryIndex(NewContext().get(), {}, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

absl::Status InferenceClient::Load(const std::string& model,
                                   const std::string& config_json) {
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(model);
  if (!config_json.empty()) {
    (*request.mutable_parameters())["config"].set_string_param(config_json);
  }
  inference::RepositoryModelLoadResponse response;
  return ToAbsl(
      inference_->RepositoryModelLoad(NewContext().get(), request, &response));
}

absl::Status InferenceClient::Unload(const std::string& model) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(model);
  inference::RepositoryModelUnloadResponse response;
  return ToAbsl(inference_->RepositoryModelUnload(NewContext().get(), request,
                                                  &response));
}

}  // namespace castserve
