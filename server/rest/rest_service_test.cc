#include "server/rest/rest_service.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"
#include "server/core/auth.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"
#include "server/metrics/unrouted_requests.h"
#include "server/test_util/fake_model_manager.h"
#include "server/test_util/http_client.h"

namespace castserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kClientTimeoutSeconds = 10;
constexpr char kInferToken[] = "infer-token-0123456789";
constexpr char kAdminToken[] = "admin-token-0123456789";

using test_util::ReadToEnd;

int Connect(int port) {
  return test_util::ConnectLocal(port, kClientTimeoutSeconds);
}

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

struct Reply {
  int status = 0;
  std::string head;
  std::string body;

  json Json() const { return json::parse(body, nullptr, false); }
  std::string Header(const std::string& name) const {
    const size_t at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "";
    const size_t start = at + name.size() + 4;
    return head.substr(start, head.find("\r\n", start) - start);
  }
};

Reply Parse(const std::string& raw) {
  Reply reply;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || end == std::string::npos) return reply;
  reply.head = raw.substr(0, end);
  reply.body = raw.substr(end + 4);
  absl::SimpleAtoi(raw.substr(9, 3), &reply.status);
  return reply;
}

// The request text of `method path` with a body and headers; the
// connection closes after the answer.
std::string RequestText(const std::string& method, const std::string& path,
                        const std::string& body = "",
                        const std::vector<std::string>& headers = {}) {
  std::string text = absl::StrCat(
      method, " ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
  for (const std::string& header : headers)
    absl::StrAppend(&text, header, "\r\n");
  if (!body.empty() || method == "POST") {
    absl::StrAppend(&text, "Content-Length: ", body.size(), "\r\n");
  }
  return absl::StrCat(text, "\r\n", body);
}

class RestServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manager_.AddModel("fake");
    manager_.AddModel("lazy", /*lazy=*/true);
    Start(/*auth=*/nullptr);
  }

  void Start(TokenAuthenticator* auth, int64_t max_body_bytes = 1 << 20) {
    http_.reset();
    core_ = std::make_unique<InferenceCore>(&ready_, &manager_, 1 << 20, auth,
                                            nullptr);
    service_ = std::make_unique<RestService>(core_.get(), nullptr);
    HttpServerOptions options;
    options.limits.max_body_bytes = max_body_bytes;
    auto server = HttpServer::Start("127.0.0.1", 0, options, service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
  }

  void TearDown() override {
    manager_.model("fake")->Release();
    http_.reset();
  }

  Reply Call(const std::string& method, const std::string& path,
             const std::string& body = "",
             const std::vector<std::string>& headers = {}) {
    const int fd = Connect(http_->port());
    if (fd < 0) return {};
    Send(fd, RequestText(method, path, body, headers));
    Reply reply = Parse(ReadToEnd(fd));
    close(fd);
    return reply;
  }

  uint64_t Unrouted() {
    CountsByCode by_code = UnroutedRequests::Global().snapshot();
    return std::accumulate(by_code.begin(), by_code.end(), uint64_t{0});
  }

  std::atomic<bool> ready_{true};
  testing::FakeModelManager manager_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<RestService> service_;
  std::unique_ptr<HttpServer> http_;
};

constexpr char kInferBody[] =
    R"({"id":"r7","inputs":[{"name":"x","datatype":"FP32","shape":[2,2],)"
    R"("data":[[1,2],[3,4]]}]})";

TEST_F(RestServiceTest, HealthAndServerMetadata) {
  Reply live = Call("GET", "/v2/health/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(live.Json()["live"], true);
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 200);
  ready_ = false;
  Reply not_ready = Call("GET", "/v2/health/ready");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(not_ready.Json()["ready"], false);
  ready_ = true;
  Reply metadata = Call("GET", "/v2");
  EXPECT_EQ(metadata.status, 200);
  EXPECT_EQ(metadata.Json()["name"], "castserve");
  EXPECT_THAT(metadata.Header("Content-Type"), HasSubstr("application/json"));
  EXPECT_THAT(metadata.body, HasSubstr("binary_tensor_data"));
}

TEST_F(RestServiceTest, ModelMetadataReadyAndConfig) {
  Reply metadata = Call("GET", "/v2/models/fake");
  ASSERT_EQ(metadata.status, 200) << metadata.body;
  EXPECT_EQ(metadata.Json()["inputs"][0]["shape"], json({-1, 2}));
  EXPECT_EQ(metadata.Json()["versions"], json({"1"}));
  EXPECT_EQ(Call("GET", "/v2/models/fake/versions/1/ready").status, 200);
  Reply lazy = Call("GET", "/v2/models/lazy/ready");
  EXPECT_EQ(lazy.status, 503);
  EXPECT_EQ(lazy.Json()["ready"], false);
  Reply config = Call("GET", "/v2/models/fake/config");
  ASSERT_EQ(config.status, 200);
  EXPECT_EQ(config.Json()["max_batch_size"], 4);
  EXPECT_EQ(config.Json()["backend"], "castserve");
  Reply unknown = Call("GET", "/v2/models/ghost");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(unknown.Json()["error"].is_string());
  EXPECT_EQ(Call("GET", "/v2/models/fake/versions/2").status, 404);
}

TEST_F(RestServiceTest, InferWithJsonTensors) {
  Reply reply = Call("POST", "/v2/models/fake/infer", kInferBody);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = reply.Json();
  EXPECT_EQ(body["id"], "r7");
  EXPECT_EQ(body["model_name"], "fake");
  EXPECT_EQ(body["outputs"][0]["name"], "y");
  EXPECT_EQ(body["outputs"][0]["shape"], json({2, 2}));
  EXPECT_EQ(body["outputs"][0]["data"], json({2.0, 4.0, 6.0, 8.0}));
  EXPECT_EQ(body["outputs"][1]["data"], json({6.0, 14.0}));
  EXPECT_EQ(reply.Header("Inference-Header-Content-Length"), "");
}

TEST_F(RestServiceTest, InferWithBinaryTensorsBothWays) {
  const std::vector<float> x = {1, 2};
  const std::string header =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],)"
      R"("parameters":{"binary_data_size":8}}],)"
      R"("outputs":[{"name":"y","parameters":{"binary_data":true}}]})";
  const std::string body =
      header + std::string(reinterpret_cast<const char*>(x.data()), 8);
  Reply reply =
      Call("POST", "/v2/models/fake/infer", body,
           {absl::StrCat("Inference-Header-Content-Length: ", header.size()),
            "Content-Type: application/octet-stream"});
  ASSERT_EQ(reply.status, 200) << reply.body;
  size_t json_bytes = 0;
  ASSERT_TRUE(absl::SimpleAtoi(reply.Header("Inference-Header-Content-Length"),
                               &json_bytes));
  const json head = json::parse(reply.body.substr(0, json_bytes));
  EXPECT_EQ(head["outputs"][0]["parameters"]["binary_data_size"], 8);
  std::vector<float> y(2);
  ASSERT_EQ(reply.body.size(), json_bytes + 8);
  std::memcpy(y.data(), reply.body.data() + json_bytes, 8);
  EXPECT_EQ(y, (std::vector<float>{2, 4}));
}

TEST_F(RestServiceTest, ErrorsMapToHttpCodesAndCountOnce) {
  const uint64_t unrouted = Unrouted();
  const uint64_t failed = manager_.model("fake")->statistics().fail_count;
  Reply malformed = Call("POST", "/v2/models/fake/infer", "{");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_THAT(malformed.Json()["error"].get<std::string>(),
              HasSubstr("invalid JSON"));
  EXPECT_EQ(Unrouted(), unrouted + 1);
  Reply bad_shape = Call(
      "POST", "/v2/models/fake/infer",
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})");
  EXPECT_EQ(bad_shape.status, 400);
  EXPECT_THAT(bad_shape.Json()["error"].get<std::string>(),
              HasSubstr("input 'x'"));
  EXPECT_EQ(manager_.model("fake")->statistics().fail_count, failed + 1);
  EXPECT_EQ(Call("POST", "/v2/models/ghost/infer", kInferBody).status, 404);
  EXPECT_EQ(Unrouted(), unrouted + 2);
  Reply wrong_method = Call("GET", "/v2/models/fake/infer");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(wrong_method.Header("Allow"), "POST");
  EXPECT_EQ(Call("GET", "/v2/nothing").status, 404);
  EXPECT_EQ(Call("POST", "/v2/models/fake/infer", kInferBody,
                 {"Content-Encoding: gzip"})
                .status,
            415);
}

TEST_F(RestServiceTest, BodiesPastTheLimitAre413) {
  Start(nullptr, /*max_body_bytes=*/64);
  Reply reply = Call("POST", "/v2/models/fake/infer", kInferBody);
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(manager_.model("fake")->infer_calls(), 0);
}

TEST_F(RestServiceTest, TokensGuardEveryPathButHealth) {
  platform::FakeFileSystem files;
  files.AddFile("/tokens", absl::StrCat(kInferToken, " infer\n", kAdminToken,
                                        " admin,infer\n"));
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::Open("/tokens", &files);
  ASSERT_TRUE(auth.ok()) << auth.status();
  Start(auth->get());
  const std::string infer = absl::StrCat("Authorization: Bearer ", kInferToken);
  const std::string admin = absl::StrCat("Authorization: Bearer ", kAdminToken);
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 200);
  Reply anonymous = Call("POST", "/v2/models/fake/infer", kInferBody);
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(anonymous.Header("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Call("POST", "/v2/models/fake/infer", kInferBody, {infer}).status,
            200);
  EXPECT_EQ(Call("POST", "/v2/repository/index", "", {infer}).status, 403);
  EXPECT_EQ(Call("POST", "/v2/repository/index", "", {admin}).status, 200);
  EXPECT_EQ(Call("GET", "/v2/models/fake", "",
                 {"Authorization: Bearer wrong-token-0123456789"})
                .status,
            401);
  http_.reset();  // Before `auth` goes.
}

TEST_F(RestServiceTest, StatisticsCountRestRequests) {
  ASSERT_EQ(Call("POST", "/v2/models/fake/infer", kInferBody).status, 200);
  Reply one = Call("GET", "/v2/models/fake/stats");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.Json()["model_stats"][0]["inference_count"], 2);
  EXPECT_EQ(one.Json()["model_stats"][0]["inference_stats"]["success"]["count"],
            1);
  // Every field Triton writes, the cache's zeros too (perf_analyzer reads
  // them).
  EXPECT_EQ(
      one.Json()["model_stats"][0]["inference_stats"]["cache_hit"]["count"], 0);
  Reply all = Call("GET", "/v2/models/stats");
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(all.Json()["model_stats"][0]["name"], "fake");
  EXPECT_EQ(Call("GET", "/v2/models/ghost/stats").status, 404);
}

TEST_F(RestServiceTest, RepositoryIndexLoadUnload) {
  Reply index = Call("POST", "/v2/repository/index");
  ASSERT_EQ(index.status, 200) << index.body;
  ASSERT_TRUE(index.Json().is_array());
  EXPECT_EQ(index.Json()[0]["name"], "fake");
  EXPECT_EQ(index.Json()[0]["state"], "READY");
  Reply ready_only = Call("POST", "/v2/repository/index", R"({"ready":true})");
  EXPECT_EQ(ready_only.Json().size(), 1u);
  EXPECT_EQ(Call("POST", "/v2/repository/models/lazy/load").status, 200);
  EXPECT_EQ(Call("GET", "/v2/models/lazy/ready").status, 200);
  EXPECT_EQ(Call("POST", "/v2/repository/models/lazy/unload",
                 R"({"parameters":{"unload_dependents":false}})")
                .status,
            200);
  EXPECT_EQ(Call("GET", "/v2/models/lazy/ready").status, 503);
  Reply config = Call("POST", "/v2/repository/models/fake/load",
                      R"({"parameters":{"config":"{\"max_batch_size\":2}"}})");
  EXPECT_EQ(config.status, 200) << config.body;
  ASSERT_TRUE(manager_.last_override("fake").has_value());
  EXPECT_EQ(manager_.last_override("fake")->max_batch_size(), 2);
  EXPECT_EQ(Call("POST", "/v2/repository/models/fake/load",
                 R"({"parameters":{"config":"not json"}})")
                .status,
            400);
  EXPECT_EQ(Call("POST", "/v2/repository/models/fake/load",
                 R"({"parameters":{"file:1/model.pt":"AAAA"}})")
                .status,
            400);
  EXPECT_EQ(Call("POST", "/v2/repository/index", "[1]").status, 400);
}

TEST_F(RestServiceTest, LoadWithATierMovesTheModelAndTheIndexShowsIt) {
  Reply hot = Call("POST", "/v2/repository/index");
  ASSERT_EQ(hot.status, 200) << hot.body;
  EXPECT_EQ(hot.Json()[0]["tier"], "hot");
  Reply moved = Call("POST", "/v2/repository/models/fake/load",
                     R"({"parameters":{"tier":"warm"}})");
  EXPECT_EQ(moved.status, 200) << moved.body;
  EXPECT_FALSE(manager_.last_override("fake").has_value()) << "no reload";
  Reply index = Call("POST", "/v2/repository/index");
  EXPECT_EQ(index.Json()[0]["name"], "fake");
  EXPECT_EQ(index.Json()[0]["tier"], "warm");
  for (const auto& model : index.Json()) {
    if (model["state"] != "READY") {
      EXPECT_FALSE(model.contains("tier"));
    }
  }
  // Not loaded: loads it, then moves it.
  EXPECT_EQ(Call("POST", "/v2/repository/models/lazy/load",
                 R"({"parameters":{"tier":"cool"}})")
                .status,
            200);
  EXPECT_EQ(*manager_.Status("lazy")->tier, casting::WeightTier::kCool);

  Reply unknown = Call("POST", "/v2/repository/models/fake/load",
                       R"({"parameters":{"tier":"lukewarm"}})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.body.find("lukewarm"), std::string::npos) << unknown.body;
  Reply both = Call(
      "POST", "/v2/repository/models/fake/load",
      R"({"parameters":{"tier":"warm","config":"{\"max_batch_size\":2}"}})");
  EXPECT_EQ(both.status, 400);
  EXPECT_NE(both.body.find("cannot be combined"), std::string::npos)
      << both.body;
}

// Waits up to 5 s for `condition`.
template <typename Condition>
bool Eventually(Condition condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

TEST_F(RestServiceTest, SlowInferencesDoNotDelayHealth) {
  testing::FakeServedModel* model = manager_.model("fake").get();
  model->Hold();
  // More inferences in flight than the server has polling threads.
  std::vector<int> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(Connect(http_->port()));
    Send(clients.back(),
         RequestText("POST", "/v2/models/fake/infer", kInferBody));
  }
  ASSERT_TRUE(Eventually([&] { return model->held() == 6; }));
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(Call("GET", "/v2/health/ready").status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(500));
  }
  model->Release();
  for (int fd : clients) {
    EXPECT_EQ(Parse(ReadToEnd(fd)).status, 200);
    close(fd);
  }
}

TEST_F(RestServiceTest, StalledHalfBodyDoesNotBlockOthers) {
  const int stalled = Connect(http_->port());
  Send(stalled,
       "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\n"
       "Content-Length: 1000\r\n\r\n{\"inputs\":");
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(Call("POST", "/v2/models/fake/infer", kInferBody).status, 200);
    EXPECT_EQ(Call("GET", "/v2/health/live").status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(500));
  }
  close(stalled);
}

TEST_F(RestServiceTest, ClientThatGoesAwayCancelsItsInference) {
  testing::FakeServedModel* model = manager_.model("fake").get();
  const uint64_t failed = model->statistics().fail_count;
  model->Hold();
  const int fd = Connect(http_->port());
  Send(fd, RequestText("POST", "/v2/models/fake/infer", kInferBody));
  ASSERT_TRUE(Eventually([&] { return model->held() == 1; }));
  close(fd);
  model->Release();
  ASSERT_TRUE(
      Eventually([&] { return model->statistics().fail_count == failed + 1; }));
  EXPECT_EQ(
      model->statistics()
          .requests_by_code[static_cast<int>(absl::StatusCode::kCancelled)],
      1u);
}

TEST_F(RestServiceTest, StopIntakeAnswers503AndWaitsForAnswersDue) {
  testing::FakeServedModel* model = manager_.model("fake").get();
  model->Hold();
  const int fd = Connect(http_->port());
  Send(fd, RequestText("POST", "/v2/models/fake/infer", kInferBody));
  ASSERT_TRUE(Eventually([&] { return model->held() == 1; }));
  http_->StopIntake();
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 503);
  model->Release();
  http_->WaitUntilIdle();
  EXPECT_EQ(Parse(ReadToEnd(fd)).status, 200);
  close(fd);
}

}  // namespace
}  // namespace castserve
