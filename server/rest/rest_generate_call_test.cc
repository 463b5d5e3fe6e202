// REST generate and generate_stream end to end in one process: an
// HttpServer serving a RestService over a GenerationServedModel whose
// engine is scripted (test_util/fake_generation_engine.h: token i is the
// byte 'a' + i) and whose tokenizer maps bytes to ids.
#include "server/rest/rest_generate_call.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"
#include "server/rest/rest_service.h"
#include "server/servables/generation/generation_served_model.h"
#include "server/test_util/byte_tokenizer.h"
#include "server/test_util/fake_generation_engine.h"
#include "server/test_util/fake_model_manager.h"
#include "server/test_util/http_client.h"

namespace castserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using test_util::ByteTokenizer;
using test_util::FakeGenerationEngine;

// The fake manager's models plus "gen", a GenerationServedModel over a
// FakeGenerationEngine that says 'a', 'b', 'c', ... (no EOS) one token every
// 5 ms.
class GenerationModelManager : public testing::FakeModelManager {
 public:
  GenerationModelManager() {
    GenerationModelParts parts;
    parts.config.set_name("gen");
    parts.config.mutable_generation()->set_kv_cache_bytes(1 << 20);
    parts.vocab_size = 258;
    parts.max_positions = 1 << 16;
    parts.eos_token_ids = {ByteTokenizer::kEos};
    parts.tokenizer = std::make_shared<ByteTokenizer>();
    auto engine = std::make_unique<FakeGenerationEngine>(
        [](const std::vector<int64_t>&, int64_t step) {
          return 'a' + step % 26;
        },
        absl::Milliseconds(5));
    engine_ = engine.get();
    parts.engine = std::move(engine);
    absl::StatusOr<std::unique_ptr<GenerationServedModel>> model =
        GenerationServedModel::Create(std::move(parts));
    EXPECT_TRUE(model.ok()) << model.status();
    if (model.ok()) generation_ = *std::move(model);
  }

  absl::StatusOr<std::shared_ptr<ServedModel>> GetReady(
      const std::string& name, const std::string& version,
      absl::Time deadline) override {
    if (name == "gen") return generation_;
    return FakeModelManager::GetReady(name, version, deadline);
  }
  FakeGenerationEngine& engine() { return *engine_; }

 private:
  std::shared_ptr<ServedModel> generation_;
  FakeGenerationEngine* engine_ = nullptr;
};

struct Answer {
  int status = 0;
  std::string head;
  std::string body;  // De-chunked.
};

// The body of a chunked transfer ("" when it is not well formed).
std::string Dechunk(absl::string_view chunked) {
  std::string body;
  while (true) {
    const size_t line_end = chunked.find("\r\n");
    if (line_end == absl::string_view::npos) return "";
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(chunked.substr(0, line_end), &size)) return "";
    chunked.remove_prefix(line_end + 2);
    if (size == 0) return body;
    if (chunked.size() < size + 2) return "";
    body.append(chunked.data(), size);
    chunked.remove_prefix(size + 2);
  }
}

Answer ParseAnswer(const std::string& raw) {
  Answer answer;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || end == std::string::npos) return answer;
  answer.head = raw.substr(0, end);
  absl::SimpleAtoi(raw.substr(9, 3), &answer.status);
  const std::string body = raw.substr(end + 4);
  answer.body =
      answer.head.find("Transfer-Encoding: chunked") != std::string::npos
          ? Dechunk(body)
          : body;
  return answer;
}

std::string Post(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path,
                      " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Length: ",
                      body.size(), "\r\n\r\n", body);
}

// The JSON of each "data: " event of a server-sent event stream.
std::vector<json> Events(const std::string& body) {
  std::vector<json> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n")) {
    if (event.empty()) continue;
    if (!absl::ConsumePrefix(&event, "data: ")) {
      ADD_FAILURE() << "not an event: " << event;
      continue;
    }
    events.push_back(json::parse(event, nullptr, false));
  }
  return events;
}

class RestGenerateCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    core_ = std::make_unique<InferenceCore>(&ready_, &manager_, 1 << 20,
                                            nullptr, nullptr);
    service_ = std::make_unique<RestService>(core_.get(), nullptr);
    HttpServerOptions options;
    options.limits.max_body_bytes = 1 << 20;
    auto server = HttpServer::Start("127.0.0.1", 0, options, service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
  }

  Answer Call(const std::string& path, const std::string& body) {
    return ParseAnswer(test_util::Exchange(http_->port(), Post(path, body)));
  }

  std::atomic<bool> ready_{true};
  GenerationModelManager manager_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<RestService> service_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(RestGenerateCallTest, GenerateAnswersOneObject) {
  Answer answer = Call("/v2/models/gen/generate",
                       R"({"text_input": "Hi", "max_tokens": 3, "id": "a"})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_THAT(answer.head, HasSubstr("Content-Type: application/json"));
  EXPECT_EQ(json::parse(answer.body), json({{"model_name", "gen"},
                                            {"model_version", "1"},
                                            {"id", "a"},
                                            {"text_output", "abc"},
                                            {"output_ids", {97, 98, 99}},
                                            {"finish_reason", "length"}}));
}

TEST_F(RestGenerateCallTest, GenerateStreamSendsOneEventPerToken) {
  Answer answer = Call("/v2/models/gen/versions/1/generate_stream",
                       R"({"input_ids": [5, 6], "parameters": )"
                       R"({"max_tokens": 4}})");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_THAT(answer.head, HasSubstr("Content-Type: text/event-stream"));
  EXPECT_THAT(answer.head, HasSubstr("Cache-Control: no-cache"));
  const std::vector<json> events = Events(answer.body);
  ASSERT_EQ(events.size(), 4u) << answer.body;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i]["output_ids"], json({97 + i}));
    EXPECT_EQ(events[i]["text_output"], std::string(1, 'a' + i));
    EXPECT_EQ(events[i]["model_name"], "gen");
    EXPECT_EQ(events[i].contains("finish_reason"), i == 3) << i;
  }
  EXPECT_EQ(events[3]["finish_reason"], "length");
}

TEST_F(RestGenerateCallTest, ErrorsBeforeTheFirstEventAreHttpErrors) {
  Answer unknown_key = Call("/v2/models/gen/generate_stream",
                            R"({"text_input": "a", "max_new_tokens": 3})");
  EXPECT_EQ(unknown_key.status, 400);
  EXPECT_THAT(json::parse(unknown_key.body)["error"].get<std::string>(),
              HasSubstr("'max_new_tokens'"));
  Answer bad_type = Call("/v2/models/gen/generate_stream",
                         R"({"text_input": "a", "max_tokens": "many"})");
  EXPECT_EQ(bad_type.status, 400);
  EXPECT_THAT(bad_type.body, HasSubstr("parameter 'max_tokens'"));
  EXPECT_THAT(bad_type.head, HasSubstr("application/json"));
  EXPECT_EQ(Call("/v2/models/ghost/generate", R"({"text_input": "a"})").status,
            404);
  EXPECT_EQ(Call("/v2/models/gen/generate", "[]").status, 400);
}

// Sends a generate_stream request of `body` on a new connection and reads
// until the first event is in; the connection's descriptor (-1 on failure).
int StartStream(int port, const std::string& body) {
  const int fd = test_util::ConnectLocal(port, 5);
  if (fd < 0) return -1;
  const std::string request = Post("/v2/models/gen/generate_stream", body);
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  std::string got;
  char buffer[256];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    got.append(buffer, n);
  }
  return fd;
}

TEST_F(RestGenerateCallTest, ErrorAfterTheFirstEventIsAnErrorEvent) {
  const int fd =
      StartStream(http_->port(), R"({"input_ids": [1], "max_tokens": 10000})");
  ASSERT_GE(fd, 0);
  manager_.engine().Stop();  // Ends the running sequence with UNAVAILABLE.
  // The rest of the chunked body: an event is never split (they are small).
  const std::string rest = test_util::ReadToEnd(fd);
  close(fd);
  EXPECT_THAT(rest, HasSubstr("data: {\"error\":\""));
  EXPECT_THAT(rest, HasSubstr("stopped"));
  EXPECT_THAT(rest, HasSubstr("\r\n0\r\n\r\n")) << "the body ends";
}

TEST_F(RestGenerateCallTest,
       ClientClosingTheStreamCancelsItAndFreesTheKvCache) {
  const int fd =
      StartStream(http_->port(), R"({"input_ids": [1], "max_tokens": 10000})");
  ASSERT_GE(fd, 0);
  EXPECT_GT(manager_.engine().stats().kv_bytes_in_use, 0);
  close(fd);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (manager_.engine().stats().kv_bytes_in_use != 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(manager_.engine().stats().kv_bytes_in_use, 0);
  // The next request runs: the cancelled one is gone.
  EXPECT_EQ(
      Call("/v2/models/gen/generate", R"({"text_input": "x", "max_tokens": 1})")
          .status,
      200);
}

}  // namespace
}  // namespace castserve
