// InferenceClient::ModelStreamInfer against an in-process gRPC server whose
// ModelStreamInfer answers like a decoupled model: several responses per
// request, or an error.
#include "client/inference_client.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace castserve {
namespace {

// Answers each request with one response per character of its id, the
// last one marked final; an id of "fail" gets an error message.
class StreamingService : public inference::GRPCInferenceService::Service {
 public:
  grpc::Status ModelStreamInfer(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse,
                               inference::ModelInferRequest>* stream) override {
    inference::ModelInferRequest request;
    while (stream->Read(&request)) {
      inference::ModelStreamInferResponse response;
      if (request.id() == "fail") {
        response.set_error_message("parameter 'top_k' must be an integer");
        stream->Write(response);
        continue;
      }
      for (size_t i = 0; i < request.id().size(); ++i) {
        response.Clear();
        response.mutable_infer_response()->set_id(request.id().substr(i, 1));
        (*response.mutable_infer_response()
              ->mutable_parameters())["triton_final_response"]
            .set_bool_param(i + 1 == request.id().size());
        stream->Write(response);
      }
    }
    return grpc::Status::OK;
  }
};

class InferenceClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<InferenceClient>(
        "127.0.0.1:" + std::to_string(port), absl::Seconds(10));
  }
  void TearDown() override { server_->Shutdown(); }

  StreamingService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<InferenceClient> client_;
};

TEST_F(InferenceClientTest, StreamGivesEveryResponseInOrder) {
  inference::ModelInferRequest request;
  request.set_id("abc");
  std::vector<std::string> ids;
  std::vector<bool> finals;
  absl::Status status = client_->ModelStreamInfer(
      request, [&](const inference::ModelInferResponse& response) {
        ids.push_back(response.id());
        finals.push_back(
            response.parameters().at("triton_final_response").bool_param());
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(finals, (std::vector<bool>{false, false, true}));
}

TEST_F(InferenceClientTest, StreamErrorMessageEndsTheCall) {
  inference::ModelInferRequest request;
  request.set_id("fail");
  int responses = 0;
  absl::Status status = client_->ModelStreamInfer(
      request, [&](const inference::ModelInferResponse&) { ++responses; });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(status.message(), "parameter 'top_k' must be an integer");
  EXPECT_EQ(responses, 0);
}

}  // namespace
}  // namespace castserve
