#include "server/grpc/inference_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "platform/test_util/manual_executor.h"
#include "server/metrics/unrouted_requests.h"
#include "server/servables/generation/generation_served_model.h"
#include "server/test_util/byte_tokenizer.h"
#include "server/test_util/fake_generation_engine.h"
#include "server/test_util/fake_model_manager.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

inference::ModelInferRequest XRequest(const std::string& model,
                                      std::vector<float> x) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("id-7");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(static_cast<int64_t>(x.size() / 2));
  input->add_shape(2);
  request.add_raw_input_contents(FloatBytes(x));
  return request;
}

class InferenceServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manager_.AddModel("fake");
    manager_.AddModel("lazy", /*lazy=*/true);
    manager_.AddModel("broken", /*lazy=*/true, /*broken=*/true);
    Start(int64_t{1} << 20);
  }

  // (Re)starts the service with a response limit.
  void Start(int64_t max_response_bytes) {
    if (server_ != nullptr) TearDown();
    core_ =
        std::make_unique<InferenceCore>(&ready_, &manager_, max_response_bytes,
                                        /*auth=*/nullptr, executor_, clock_);
    service_ = std::make_unique<InferenceService>(core_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    server_->Shutdown();
    server_->Wait();
  }

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    grpc::ClientContext context;
    return stub_->ModelInfer(&context, request, response);
  }

  std::atomic<bool> ready_{true};
  // Runs the calls that wait; null: platform::Executor::Default().
  platform::Executor* executor_ = nullptr;
  // What the core's `timeout` parameter counts from.
  platform::Clock* clock_ = &platform::Clock::Real();
  testing::FakeModelManager manager_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(InferenceServiceTest, InferReturnsRawOutputsAndEchoesId) {
  inference::ModelInferResponse response;
  grpc::Status status = Infer(XRequest("fake", {1, 2, 3, 4}), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "id-7");
  EXPECT_EQ(response.model_name(), "fake");
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "y");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_THAT(Floats(response.raw_output_contents(0)), ElementsAre(2, 4, 6, 8));
  EXPECT_THAT(Floats(response.raw_output_contents(1)), ElementsAre(6, 14));
}

TEST_F(InferenceServiceTest, RequestedOutputsFilter) {
  inference::ModelInferRequest request = XRequest("fake", {1, 2});
  request.add_outputs()->set_name("sum");
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(request, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "sum");
  request.add_outputs()->set_name("nope");
  grpc::Status status = Infer(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("unknown output 'nope'"));
}

TEST_F(InferenceServiceTest, BadInputsAreInvalidArgument) {
  inference::ModelInferResponse response;
  inference::ModelInferRequest wrong_size = XRequest("fake", {1, 2});
  wrong_size.set_raw_input_contents(0, "abc");
  EXPECT_EQ(Infer(wrong_size, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  inference::ModelInferRequest too_big =
      XRequest("fake", std::vector<float>(10, 1.0f));
  grpc::Status status = Infer(too_big, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_batch_size 4"));
}

TEST_F(InferenceServiceTest, UnknownModelIsNotFound) {
  inference::ModelInferResponse response;
  EXPECT_EQ(Infer(XRequest("ghost", {1, 2}), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(InferenceServiceTest, BrokenModelIsUnavailableWithReason) {
  inference::ModelInferResponse response;
  grpc::Status status = Infer(XRequest("broken", {1, 2}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("broken checkpoint"));
}

TEST_F(InferenceServiceTest, LazyModelLoadsOnFirstRequest) {
  grpc::ClientContext ready_context;
  inference::ModelReadyRequest ready_request;
  ready_request.set_name("lazy");
  inference::ModelReadyResponse ready_response;
  ASSERT_TRUE(
      stub_->ModelReady(&ready_context, ready_request, &ready_response).ok());
  EXPECT_FALSE(ready_response.ready());
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(XRequest("lazy", {1, 2}), &response).ok());
  grpc::ClientContext again;
  ASSERT_TRUE(stub_->ModelReady(&again, ready_request, &ready_response).ok());
  EXPECT_TRUE(ready_response.ready());
}

TEST_F(InferenceServiceTest, DeadlineAndTimeoutParameterReachTheModel) {
  inference::ModelInferRequest request = XRequest("fake", {1, 2});
  (*request.mutable_parameters())["timeout"].set_int64_param(5'000'000);
  (*request.mutable_parameters())["something_custom"].set_string_param("x");
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  ASSERT_TRUE(stub_->ModelInfer(&context, request, &response).ok());
  const absl::Duration left =
      manager_.model("fake")->last_deadline() - absl::Now();
  EXPECT_GT(left, absl::Seconds(1));
  EXPECT_LT(left, absl::Seconds(6));
}

TEST_F(InferenceServiceTest, TimeoutParameterCountsFromTheCoresClock) {
  // Held still at the real now: the deadline is exactly that now + timeout,
  // earlier than the call's own (60 s), whatever time the call took.
  platform::test_util::FakeClock clock(absl::Now());
  const absl::Time start = clock.Now();
  clock_ = &clock;
  Start(int64_t{1} << 20);
  inference::ModelInferRequest request = XRequest("fake", {1, 2});
  (*request.mutable_parameters())["timeout"].set_int64_param(5'000'000);
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  ASSERT_TRUE(stub_->ModelInfer(&context, request, &response).ok());
  EXPECT_EQ(manager_.model("fake")->last_deadline(), start + absl::Seconds(5));
  TearDown();
  clock_ = &platform::Clock::Real();
  Start(int64_t{1} << 20);
}

TEST_F(InferenceServiceTest, MetadataAndConfig) {
  grpc::ClientContext context;
  inference::ModelMetadataRequest request;
  request.set_name("fake");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(stub_->ModelMetadata(&context, request, &metadata).ok());
  EXPECT_EQ(metadata.name(), "fake");
  EXPECT_THAT(metadata.versions(), ElementsAre("1"));
  ASSERT_EQ(metadata.inputs_size(), 2);
  EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata.inputs(0).shape(), ElementsAre(-1, 2));
  EXPECT_EQ(metadata.outputs(1).name(), "sum");

  grpc::ClientContext config_context;
  inference::ModelConfigRequest config_request;
  config_request.set_name("fake");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(
      stub_->ModelConfig(&config_context, config_request, &config).ok());
  EXPECT_EQ(config.config().max_batch_size(), 4);
  EXPECT_EQ(config.config().backend(), "castserve");
  EXPECT_TRUE(config.config().has_dynamic_batching());

  grpc::ClientContext bad_version;
  request.set_version("2");
  EXPECT_EQ(stub_->ModelMetadata(&bad_version, request, &metadata).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(InferenceServiceTest, ServerMetadataListsWorkingExtensions) {
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  ASSERT_TRUE(stub_->ServerMetadata(&context, {}, &response).ok());
  EXPECT_THAT(response.extensions(),
              ElementsAre("model_repository", "model_configuration",
                          "statistics", "binary_tensor_data"));
}

TEST_F(InferenceServiceTest, StatisticsCountBatchesAndMemory) {
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(XRequest("fake", {1, 2, 3, 4}), &response).ok());
  ASSERT_TRUE(Infer(XRequest("fake", {1, 2}), &response).ok());
  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name("fake");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(stub_->ModelStatistics(&context, request, &stats).ok());
  ASSERT_EQ(stats.model_stats_size(), 1);
  const inference::ModelStatistics& model = stats.model_stats(0);
  EXPECT_EQ(model.inference_count(), 3u);
  EXPECT_EQ(model.execution_count(), 2u);
  EXPECT_EQ(model.inference_stats().success().count(), 2u);
  EXPECT_EQ(model.batch_stats_size(), 2);
  ASSERT_EQ(model.memory_usage_size(), 1);
  EXPECT_EQ(model.memory_usage(0).type(), "CPU");
  EXPECT_EQ(model.memory_usage(0).byte_size(), 2000u);

  // On cuda:1 the model's device bytes are a GPU entry of their own.
  manager_.model("fake")->PlaceOn(casting::Device::Cuda(1), 5000);
  grpc::ClientContext gpu_context;
  ASSERT_TRUE(stub_->ModelStatistics(&gpu_context, request, &stats).ok());
  const inference::ModelStatistics& on_gpu = stats.model_stats(0);
  ASSERT_EQ(on_gpu.memory_usage_size(), 2);
  EXPECT_EQ(on_gpu.memory_usage(0).type(), "CPU");
  EXPECT_EQ(on_gpu.memory_usage(0).byte_size(), 1000u);
  EXPECT_EQ(on_gpu.memory_usage(1).type(), "GPU");
  EXPECT_EQ(on_gpu.memory_usage(1).id(), 1);
  EXPECT_EQ(on_gpu.memory_usage(1).byte_size(), 5000u);

  grpc::ClientContext unknown_context;
  request.set_name("ghost");
  EXPECT_EQ(
      stub_->ModelStatistics(&unknown_context, request, &stats).error_code(),
      grpc::StatusCode::NOT_FOUND);
}

// Every request counts once: rejected before the queue, failed in the
// model, refused because its response is too large, or successful.
TEST_F(InferenceServiceTest, EveryFailedRequestCountsOnce) {
  auto fail_count = [this] {
    return manager_.model("fake")->statistics().fail_count;
  };
  auto unrouted = [] {
    CountsByCode by_code = UnroutedRequests::Global().snapshot();
    return std::accumulate(by_code.begin(), by_code.end(), uint64_t{0});
  };
  const uint64_t unrouted_before = unrouted();
  inference::ModelInferResponse response;
  inference::ModelInferRequest unknown_output = XRequest("fake", {1, 2});
  unknown_output.add_outputs()->set_name("nope");
  inference::ModelInferRequest wrong_size = XRequest("fake", {1, 2});
  wrong_size.set_raw_input_contents(0, "abc");
  inference::ModelInferRequest too_many =
      XRequest("fake", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  inference::ModelInferRequest bad_timeout = XRequest("fake", {1, 2});
  (*bad_timeout.mutable_parameters())["timeout"].set_string_param("soon");
  EXPECT_FALSE(Infer(unknown_output, &response).ok());
  EXPECT_FALSE(Infer(wrong_size, &response).ok());
  EXPECT_FALSE(Infer(too_many, &response).ok());
  EXPECT_EQ(fail_count(), 3u);
  EXPECT_FALSE(Infer(XRequest("ghost", {1, 2}), &response).ok());
  EXPECT_FALSE(Infer(bad_timeout, &response).ok());
  EXPECT_EQ(unrouted(), unrouted_before + 2);
  EXPECT_EQ(fail_count(), 3u) << "the unrouted ones count elsewhere";

  // A response over the limit: the model's forward succeeded, the request
  // did not.
  Start(64);
  grpc::Status status = Infer(XRequest("fake", {1, 2, 3, 4}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("bytes, above the limit of 64 bytes "
                        "(--max-message-bytes)"));
  EXPECT_EQ(fail_count(), 4u);
  EXPECT_EQ(manager_.model("fake")->statistics().success_count, 0u);
}

TEST_F(InferenceServiceTest, RepositoryIndexLoadUnload) {
  grpc::ClientContext unload_context;
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("fake");
  inference::RepositoryModelUnloadResponse unload_response;
  ASSERT_TRUE(
      stub_->RepositoryModelUnload(&unload_context, unload, &unload_response)
          .ok());

  grpc::ClientContext index_context;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(&index_context, {}, &index).ok());
  ASSERT_EQ(index.models_size(), 3);
  EXPECT_EQ(index.models(1).name(), "fake");
  EXPECT_EQ(index.models(1).state(), "UNAVAILABLE");
  EXPECT_EQ(index.models(1).reason(), "unloaded");

  grpc::ClientContext load_context;
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("fake");
  (*load.mutable_parameters())["config"].set_string_param(
      R"({"name": "fake", "max_batch_size": 2})");
  inference::RepositoryModelLoadResponse load_response;
  ASSERT_TRUE(
      stub_->RepositoryModelLoad(&load_context, load, &load_response).ok());
  ASSERT_TRUE(manager_.last_override("fake").has_value());
  EXPECT_EQ(manager_.last_override("fake")->max_batch_size(), 2);

  grpc::ClientContext ready_index_context;
  inference::RepositoryIndexRequest ready_only;
  ready_only.set_ready(true);
  ASSERT_TRUE(
      stub_->RepositoryIndex(&ready_index_context, ready_only, &index).ok());
  ASSERT_EQ(index.models_size(), 1);
  EXPECT_EQ(index.models(0).state(), "READY");
}

TEST_F(InferenceServiceTest, RepositoryCallsAndFirstLoadsWaitOnTheExecutor) {
  platform::test_util::ManualExecutor executor;
  executor_ = &executor;
  Start(int64_t{1} << 20);
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("fake");
  inference::RepositoryModelUnloadResponse unload_response;
  grpc::ClientContext unload_context;
  absl::Notification unloaded;
  grpc::Status unload_status;
  stub_->async()->RepositoryModelUnload(
      &unload_context, &unload, &unload_response, [&](grpc::Status status) {
        unload_status = std::move(status);
        unloaded.Notify();
      });
  inference::ModelMetadataRequest metadata;
  metadata.set_name("lazy");
  inference::ModelMetadataResponse metadata_response;
  grpc::ClientContext metadata_context;
  absl::Notification described;
  stub_->async()->ModelMetadata(&metadata_context, &metadata,
                                &metadata_response,
                                [&](grpc::Status) { described.Notify(); });
  // Both wait on the executor, holding no gRPC thread, until it runs them.
  for (int i = 0; i < 1000 && executor.pending() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(executor.pending(), 2);
  EXPECT_FALSE(unloaded.HasBeenNotified());
  EXPECT_EQ(executor.RunPending(), 2);
  unloaded.WaitForNotification();
  described.WaitForNotification();
  EXPECT_TRUE(unload_status.ok()) << unload_status.error_message();
  EXPECT_EQ(metadata_response.name(), "lazy");
  executor_ = nullptr;  // The service must not outlive `executor`.
  Start(int64_t{1} << 20);
}

TEST_F(InferenceServiceTest, LoadRejectsBadConfigAndBadNames) {
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("fake");
  (*load.mutable_parameters())["config"].set_string_param("{not json");
  inference::RepositoryModelLoadResponse response;
  grpc::ClientContext bad_json;
  EXPECT_EQ(stub_->RepositoryModelLoad(&bad_json, load, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  load.clear_parameters();
  load.set_model_name("../etc");
  grpc::ClientContext bad_name;
  EXPECT_EQ(stub_->RepositoryModelLoad(&bad_name, load, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(InferenceServiceTest, LoadWithATierMovesTheModel) {
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("fake");
  (*load.mutable_parameters())["tier"].set_string_param("cool");
  inference::RepositoryModelLoadResponse response;
  grpc::ClientContext move_context;
  ASSERT_TRUE(stub_->RepositoryModelLoad(&move_context, load, &response).ok());
  EXPECT_FALSE(manager_.last_override("fake").has_value()) << "no reload";

  grpc::ClientContext index_context;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(&index_context, {}, &index).ok());
  for (const auto& model : index.models()) {
    if (model.name() == "fake") {
      EXPECT_EQ(model.tier(), "cool");
    }
    if (model.state() != "READY") {
      EXPECT_EQ(model.tier(), "");
    }
  }

  (*load.mutable_parameters())["tier"].set_string_param("tepid");
  grpc::ClientContext unknown;
  const grpc::Status refused =
      stub_->RepositoryModelLoad(&unknown, load, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("'tepid'"), std::string::npos);
  (*load.mutable_parameters())["tier"].set_int64_param(1);
  grpc::ClientContext not_a_string;
  EXPECT_EQ(
      stub_->RepositoryModelLoad(&not_a_string, load, &response).error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  (*load.mutable_parameters())["tier"].set_string_param("warm");
  (*load.mutable_parameters())["config"].set_string_param("{}");
  grpc::ClientContext both;
  EXPECT_EQ(stub_->RepositoryModelLoad(&both, load, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(InferenceServiceTest, StreamAnswersInOrderAndSurvivesErrors) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) {
    inference::ModelInferRequest request =
        XRequest("fake", {static_cast<float>(i), 1});
    request.set_id(std::to_string(i));
    if (i == 5) request.set_raw_input_contents(0, "bad");
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(stream->Read(&response)) << i;
    EXPECT_EQ(response.infer_response().id(), std::to_string(i));
    if (i == 5) {
      EXPECT_THAT(response.error_message(), HasSubstr("raw data has 3 bytes"));
    } else {
      EXPECT_EQ(response.error_message(), "");
      EXPECT_THAT(Floats(response.infer_response().raw_output_contents(0)),
                  ElementsAre(2.0f * i, 2));
    }
  }
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(InferenceServiceTest, CancelledStreamFinishesAndServerShutsDown) {
  for (int round = 0; round < 5; ++round) {
    grpc::ClientContext context;
    auto stream = stub_->ModelStreamInfer(&context);
    for (int i = 0; i < 30; ++i) {
      if (!stream->Write(XRequest("fake", {1, 2}))) break;
    }
    context.TryCancel();
    inference::ModelStreamInferResponse response;
    while (stream->Read(&response)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // TearDown's Shutdown + Wait would hang on a reactor that never finished.
}

TEST_F(InferenceServiceTest, UnknownModelInStreamIsAnErrorMessage) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(XRequest("ghost", {1, 2})));
  ASSERT_TRUE(stream->Write(XRequest("fake", {1, 2})));
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_THAT(response.error_message(), HasSubstr("unknown model 'ghost'"));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_message(), "");
  EXPECT_TRUE(stream->Finish().ok());
}

// A generation model "gen" that writes `text` one byte per token, then EOS.
std::shared_ptr<GenerationServedModel> AddGenerationModel(
    testing::FakeModelManager& manager, const std::string& text,
    absl::Duration step = absl::Milliseconds(1), int64_t max_positions = 256) {
  GenerationModelParts parts;
  parts.config.set_name("gen");
  parts.config.mutable_generation()->set_kv_cache_bytes(1 << 20);
  parts.vocab_size = 258;
  parts.max_positions = max_positions;
  parts.eos_token_ids = {test_util::ByteTokenizer::kEos};
  parts.tokenizer = std::make_shared<test_util::ByteTokenizer>();
  parts.engine = std::make_unique<test_util::FakeGenerationEngine>(
      [text](const std::vector<int64_t>&, int64_t step) -> int64_t {
        return step < static_cast<int64_t>(text.size())
                   ? static_cast<unsigned char>(text[step])
                   : test_util::ByteTokenizer::kEos;
      },
      step);
  std::shared_ptr<GenerationServedModel> model =
      *GenerationServedModel::Create(std::move(parts));
  manager.AddServedModel("gen", model);
  return model;
}

inference::ModelInferRequest TextRequest(const std::string& text) {
  inference::ModelInferRequest request;
  request.set_model_name("gen");
  request.set_id("g");
  auto* input = request.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(text);
  return request;
}

bool IsFinal(const inference::ModelInferResponse& response) {
  auto it = response.parameters().find("triton_final_response");
  return it != response.parameters().end() && it->second.bool_param();
}

// The text_output of a generation response ("" without one).
std::string TextOutput(const inference::ModelInferResponse& response) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == "text_output") {
      return response.raw_output_contents(i).substr(4);
    }
  }
  return "";
}

TEST_F(InferenceServiceTest, DecoupledStreamWritesEachTokenThenTheFinal) {
  AddGenerationModel(manager_, "abc");
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(TextRequest("hi")));
  ASSERT_TRUE(stream->Write(XRequest("fake", {1, 2})));  // After it, in order.
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  std::string text;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Read(&response)) << i;
    EXPECT_EQ(response.error_message(), "");
    EXPECT_EQ(response.infer_response().id(), "g");
    EXPECT_FALSE(IsFinal(response.infer_response())) << i;
    text += TextOutput(response.infer_response());
  }
  EXPECT_EQ(text, "abc");
  ASSERT_TRUE(stream->Read(&response));  // The EOS token's, final.
  EXPECT_TRUE(IsFinal(response.infer_response()));
  EXPECT_EQ(
      response.infer_response().parameters().at("finish_reason").string_param(),
      "stop");
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.infer_response().id(), "id-7");
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(InferenceServiceTest, DecoupledStreamEmptyFinalResponse) {
  AddGenerationModel(manager_, "ab");
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  inference::ModelInferRequest request = TextRequest("hi");
  (*request.mutable_parameters())["triton_enable_empty_final_response"]
      .set_bool_param(true);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  inference::ModelStreamInferResponse response;
  for (int i = 0; i < 3; ++i) {  // a, b, EOS.
    ASSERT_TRUE(stream->Read(&response)) << i;
    EXPECT_FALSE(IsFinal(response.infer_response())) << i;
    EXPECT_EQ(response.infer_response().outputs_size(), 2) << i;
  }
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_TRUE(IsFinal(response.infer_response()));
  EXPECT_EQ(response.infer_response().outputs_size(), 0);
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(InferenceServiceTest, ClientGoingAwayCancelsTheSequence) {
  std::shared_ptr<GenerationServedModel> model = AddGenerationModel(
      manager_, std::string(200, 'z'), absl::Milliseconds(10));
  {
    grpc::ClientContext context;
    auto stream = stub_->ModelStreamInfer(&context);
    inference::ModelInferRequest request = TextRequest("hi");
    (*request.mutable_parameters())["max_tokens"].set_int64_param(200);
    ASSERT_TRUE(stream->Write(request));
    inference::ModelStreamInferResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_GT(model->activity().kv_cache->bytes, 0);
    context.TryCancel();
    while (stream->Read(&response)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (model->pending_requests() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(model->pending_requests(), 0);
  EXPECT_EQ(model->activity().kv_cache->bytes, 0);
  EXPECT_EQ(
      model->statistics()
          .requests_by_code[static_cast<int>(absl::StatusCode::kCancelled)],
      1u);
}

TEST_F(InferenceServiceTest, ClientThatDoesNotReadGetsItsSequenceCancelled) {
  constexpr int kTokens = 20000;
  std::shared_ptr<GenerationServedModel> model = AddGenerationModel(
      manager_, std::string(kTokens, 'z'), absl::ZeroDuration(), kTokens + 16);
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  inference::ModelInferRequest request = TextRequest("hi");
  (*request.mutable_parameters())["max_tokens"].set_int64_param(kTokens);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  // Nothing is read until the sequence has ended.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  do {
    absl::SleepFor(absl::Milliseconds(5));
  } while (model->pending_requests() > 0 && absl::Now() < give_up);
  ASSERT_EQ(model->pending_requests(), 0);
  inference::ModelStreamInferResponse response;
  int responses = 0;
  std::string last_error;
  while (stream->Read(&response)) {
    ++responses;
    last_error = response.error_message();
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_LT(responses, kTokens);
  EXPECT_THAT(last_error, HasSubstr("did not read"));
  EXPECT_EQ(
      model->statistics()
          .requests_by_code[static_cast<int>(absl::StatusCode::kCancelled)],
      1u);
}

TEST_F(InferenceServiceTest, UnaryInferOnGenerationModelReturnsItAll) {
  AddGenerationModel(manager_, "hello");
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(TextRequest("hi"), &response).ok());
  EXPECT_EQ(TextOutput(response), "hello");
  EXPECT_EQ(response.parameters().at("finish_reason").string_param(), "stop");
}

TEST_F(InferenceServiceTest, ConcurrentClients) {
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 50; ++i) {
        inference::ModelInferResponse response;
        const float value = static_cast<float>(c * 100 + i);
        if (!Infer(XRequest("fake", {value, 1}), &response).ok() ||
            Floats(response.raw_output_contents(0))[0] != 2 * value) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace castserve
