// A shutdown under load: requests in flight (gRPC and REST), a
// first-request load in progress and an unload waiting for its in-flight
// request, when Server::Shutdown runs. Everything the daemon started must end:
// every call gets its answer, every model is released, the load returns, and no
// thread is left running (the sanitizer runs: tools/run_sanitizers.sh).
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "platform/executor.h"
#include "platform/test_util/fake_clock.h"
#include "proto/inference.grpc.pb.h"
#include "server/lifecycle/model_manager.h"
#include "server/server.h"
#include "server/test_util/fake_model_manager.h"
#include "server/test_util/http_client.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kPoll = absl::Milliseconds(1);
constexpr absl::Duration kPatience = absl::Seconds(30);

// Polls `condition` until it holds or kPatience passed; returns it.
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + kPatience;
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(kPoll);
  }
  return true;
}

// A REST inference of `model` sent on a new connection to 127.0.0.1:port;
// the connected socket (its reads give up after 30 s), or -1.
int SendRestInfer(int port, const std::string& model) {
  const int fd = test_util::ConnectLocal(port, /*read_timeout_seconds=*/30);
  if (fd < 0) return -1;
  const std::string body =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],)"
      R"("data":[1,2]}]})";
  const std::string request =
      absl::StrCat("POST /v2/models/", model, "/infer HTTP/1.1\r\nHost: x\r\n",
                   "Content-Length: ", body.size(), "\r\n\r\n", body);
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// Holds every request until the call or the model is cancelled, on a
// worker thread of its own that it joins when it goes (from that thread
// itself when the last reference to the model was a request's: then the
// executor joins it, as BatchingServedModel does).
class HangingModel final : public testing::FakeServedModel {
 public:
  HangingModel(const std::string& name,
               std::shared_ptr<const models::Cancellation> cancellation,
               std::atomic<int>* live)
      : FakeServedModel(name),
        cancellation_(std::move(cancellation)),
        live_(live) {
    ++*live_;
    worker_ = platform::Executor::Default().StartThread([this] { Loop(); });
  }
  ~HangingModel() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (worker_->IsCurrent()) {
      platform::Executor::Default().JoinLater(std::move(worker_));
    } else {
      worker_->Join();
    }
    --*live_;
  }

  void Infer(InferenceCall request,
             std::function<void(absl::Status)> done) override {
    ++pending_;
    absl::MutexLock lock(&mu_);
    held_.push_back({std::move(request), std::move(done)});
  }
  int64_t pending_requests() const override { return pending_; }

 private:
  struct Held {
    InferenceCall request;
    std::function<void(absl::Status)> done;
  };

  void Loop() {
    for (;;) {
      std::vector<Held> finished;
      bool stopping;
      {
        absl::MutexLock lock(&mu_);
        stopping = stopping_;
        for (auto it = held_.begin(); it != held_.end();) {
          const bool call_cancelled =
              it->request.is_cancelled && it->request.is_cancelled();
          if (stopping || call_cancelled || cancellation_->cancelled()) {
            finished.push_back(std::move(*it));
            it = held_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (Held& held : finished) {
        held.done(absl::CancelledError("cancelled while held"));
        held = Held();  // Lets go of the model before it stops counting.
        --pending_;
      }
      if (stopping) return;
      absl::SleepFor(kPoll);
    }
  }

  const std::shared_ptr<const models::Cancellation> cancellation_;
  std::atomic<int>* const live_;
  std::atomic<int64_t> pending_{0};
  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<platform::Thread> worker_;
};

// Makes HangingModels; the load of "lazy" runs until it is cancelled.
class HangingFactory final : public ServedModelFactory {
 public:
  absl::StatusOr<std::shared_ptr<ServedModel>> Create(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation) override {
    if (config.name() != "lazy") {
      auto model =
          std::make_shared<HangingModel>(config.name(), cancellation, &live_);
      absl::MutexLock lock(&mu_);
      models_[config.name()] = model;
      return model;
    }
    ++loads_running_;
    Eventually([&] { return cancellation->cancelled(); });
    --loads_running_;
    return absl::CancelledError("load cancelled");
  }
  // The daemon under test runs without a memory budget: never asked.
  absl::StatusOr<int64_t> ProjectedBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) override {
    return 0;
  }

  int live_models() const { return live_; }
  int loads_running() const { return loads_running_; }
  int64_t pending(const std::string& name) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<HangingModel> model = models_[name].lock();
    return model ? model->pending_requests() : -1;
  }

 private:
  std::atomic<int> live_{0};
  std::atomic<int> loads_running_{0};
  absl::Mutex mu_;
  std::map<std::string, std::weak_ptr<HangingModel>> models_
      ABSL_GUARDED_BY(mu_);
};

inference::ModelInferRequest XRequest(const std::string& model) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(1);
  input->add_shape(2);
  const float x[2] = {1, 2};
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(x), sizeof(x)));
  return request;
}

// One asynchronous call and its outcome.
struct Call {
  grpc::ClientContext context;
  inference::ModelInferRequest infer_request;
  inference::ModelInferResponse infer_response;
  inference::ModelMetadataRequest metadata_request;
  inference::ModelMetadataResponse metadata_response;
  inference::RepositoryModelUnloadRequest unload_request;
  inference::RepositoryModelUnloadResponse unload_response;
  std::atomic<bool> done{false};
  grpc::Status status;
  std::function<void(grpc::Status)> Finisher() {
    return [this](grpc::Status result) {
      status = std::move(result);
      done = true;
    };
  }
};

class ServerShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") / "shutdown_repository";
    fs::remove_all(root_);
    WriteConfig("busy", "");
    WriteConfig("draining", "");
    WriteConfig("lazy", "load_policy: LOAD_POLICY_FIRST_REQUEST");
  }
  void WriteConfig(const std::string& model, const std::string& text) {
    fs::create_directories(root_ / model);
    std::ofstream(root_ / model / "config.pbtxt") << text;
  }
  std::string StateOf(inference::GRPCInferenceService::Stub& stub,
                      const std::string& model) {
    grpc::ClientContext context;
    inference::RepositoryIndexRequest request;
    inference::RepositoryIndexResponse response;
    if (!stub.RepositoryIndex(&context, request, &response).ok()) return "";
    for (const auto& entry : response.models()) {
      if (entry.name() == model) return entry.state();
    }
    return "";
  }

  fs::path root_;
};

TEST_F(ServerShutdownTest, ShutdownUnderLoadEndsEverythingItStarted) {
  constexpr int kBusyRequests = 4;
  HangingFactory factory;
  std::vector<std::unique_ptr<Call>> calls;
  int rest = -1;
  {
    ServerOptions options;
    options.model_repository = root_.string();
    options.bind_address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_port = 0;
    options.http_port = 0;
    options.model_factory = &factory;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->grpc_port()),
                            grpc::InsecureChannelCredentials()));

    auto infer = [&](const std::string& model) {
      calls.push_back(std::make_unique<Call>());
      Call& call = *calls.back();
      call.infer_request = XRequest(model);
      stub->async()->ModelInfer(&call.context, &call.infer_request,
                                &call.infer_response, call.Finisher());
    };
    for (int i = 0; i < kBusyRequests; ++i) infer("busy");
    infer("draining");
    // And one over REST, its connection parked while the model holds it.
    rest = SendRestInfer((*server)->http_port(), "busy");
    ASSERT_GE(rest, 0);
    ASSERT_TRUE(Eventually([&] {
      return factory.pending("busy") == kBusyRequests + 1 &&
             factory.pending("draining") == 1;
    }));

    // A first-request load, in progress.
    calls.push_back(std::make_unique<Call>());
    Call& metadata = *calls.back();
    metadata.metadata_request.set_name("lazy");
    stub->async()->ModelMetadata(&metadata.context, &metadata.metadata_request,
                                 &metadata.metadata_response,
                                 metadata.Finisher());
    ASSERT_TRUE(Eventually([&] { return factory.loads_running() == 1; }));

    // An unload, waiting for the request still on the model.
    calls.push_back(std::make_unique<Call>());
    Call& unload = *calls.back();
    unload.unload_request.set_model_name("draining");
    stub->async()->RepositoryModelUnload(
        &unload.context, &unload.unload_request, &unload.unload_response,
        unload.Finisher());
    ASSERT_TRUE(
        Eventually([&] { return StateOf(*stub, "draining") == "UNLOADING"; }));
    EXPECT_EQ(StateOf(*stub, "lazy"), "LOADING");

    const absl::Time start = absl::Now();
    (*server)->Shutdown(absl::Milliseconds(100));
    // Bounded by the grace and the cancellation, not by the held requests.
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    server->reset();
  }
  platform::Executor::Default().Drain();

  // The REST call was answered (its forward cancelled: 503) before the
  // port closed.
  char answer[64] = {};
  EXPECT_GT(read(rest, answer, sizeof answer - 1), 0);
  EXPECT_EQ(std::string(answer).substr(0, 12), "HTTP/1.1 503") << answer;
  close(rest);
  EXPECT_EQ(factory.live_models(), 0);  // Every model was released.
  EXPECT_EQ(factory.loads_running(), 0);
  ASSERT_EQ(calls.size(), kBusyRequests + 3u);
  for (const std::unique_ptr<Call>& call : calls) {
    ASSERT_TRUE(Eventually([&] { return call->done.load(); }));
    // The held requests and the load end cancelled or refused; the unload
    // finishes (its model drained).
    if (&call == &calls.back()) continue;
    EXPECT_FALSE(call->status.ok());
  }
}

}  // namespace
TEST_F(ServerShutdownTest, GraceIsMeasuredByTheServersClock) {
  HangingFactory factory;
  platform::test_util::FakeClock clock;
  auto call = std::make_unique<Call>();
  {
    ServerOptions options;
    options.model_repository = root_.string();
    options.bind_address = "127.0.0.1";
    options.grpc_port = 0;
    options.metrics_port = 0;
    options.http_port = std::nullopt;
    options.model_factory = &factory;
    options.clock = &clock;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->grpc_port()),
                            grpc::InsecureChannelCredentials()));
    call->infer_request = XRequest("busy");
    stub->async()->ModelInfer(&call->context, &call->infer_request,
                              &call->infer_response, call->Finisher());
    ASSERT_TRUE(Eventually([&] { return factory.pending("busy") == 1; }));

    // An hour of grace in real time would outlast the test; the server's
    // clock says when it is over.
    std::atomic<bool> shut_down{false};
    std::thread shutdown([&] {
      (*server)->Shutdown(absl::Hours(1));
      shut_down = true;
    });
    for (int i = 0; i < 60'000 && !shut_down; ++i) {
      clock.Advance(absl::Hours(1));
      absl::SleepFor(absl::Milliseconds(1));
    }
    shutdown.join();
    EXPECT_TRUE(shut_down);
    server->reset();
  }
  platform::Executor::Default().Drain();
  ASSERT_TRUE(Eventually([&] { return call->done.load(); }));
  EXPECT_FALSE(call->status.ok());
  EXPECT_EQ(factory.live_models(), 0);
}

}  // namespace castserve
