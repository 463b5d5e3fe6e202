#ifndef CASTSERVE_CLIENT_INFERENCE_CLIENT_H_
#define CASTSERVE_CLIENT_INFERENCE_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/health.grpc.pb.h"
#include "proto/inference.grpc.pb.h"

namespace castserve {

// A thin synchronous client for castserve's gRPC API (any KServe v2 server,
// in fact). Every call has a deadline of `timeout` from its start; transport
// and server errors come back as absl::Status with the gRPC code and message.
// Thread-safe.
class InferenceClient {
 public:
  InferenceClient(const std::string& url, absl::Duration timeout);

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<bool> ServerReady();
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata();
  // grpc.health.v1 Check for `service` ("" = the whole server).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service);

  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(
      const std::string& model);
  absl::StatusOr<inference::ModelConfigResponse> ModelConfig(
      const std::string& model);
  absl::StatusOr<inference::ModelInferResponse> ModelInfer(
      const inference::ModelInferRequest& request);
  // ModelStreamInfer with the one `request`: `on_response` gets each
  // response as it arrives, until the server ends the stream. A response's
  // error_message ends the call with UNKNOWN and that message.
  absl::Status ModelStreamInfer(
      const inference::ModelInferRequest& request,
      const std::function<void(const inference::ModelInferResponse&)>&
          on_response);
  // `model` empty: every loaded model.
  absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
      const std::string& model);
  absl::StatusOr<inference::RepositoryIndexResponse> RepositoryIndex();
  // `config_json` (a ModelConfig as JSON) replaces the model's config.pbtxt
  // when not empty.
  absl::Status Load(const std::string& model, const std::string& config_json);
  absl::Status Unload(const std::string& model);

 private:
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  const absl::Duration timeout_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> inference_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace castserve

#endif  // CASTSERVE_CLIENT_INFERENCE_CLIENT_H_
