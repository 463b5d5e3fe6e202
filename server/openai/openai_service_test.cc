// The OpenAI API end to end in one process: an HttpServer serving an
// OpenAiService over the InferenceCore and fake servables of each kind (an
// embedder, a reranker, a generator that streams), so that every answer's
// shape, every refusal and the cancellation are checked without a model.
#include "server/openai/openai_service.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"
#include "server/core/auth.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"
#include "server/test_util/fake_model_manager.h"
#include "server/test_util/http_client.h"

namespace castserve::openai {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Fake servables: what a servable of each kind answers, without a model.

std::string RawString(absl::string_view bytes) {
  std::string raw(4, '\0');
  const auto length = static_cast<uint32_t>(bytes.size());
  std::memcpy(raw.data(), &length, 4);
  return raw.append(bytes.data(), bytes.size());
}

std::string InputString(const inference::ModelInferRequest& request,
                        const std::string& name) {
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (request.inputs(i).name() != name) continue;
    const std::string& raw = request.raw_input_contents(i);
    return raw.size() >= 4 ? raw.substr(4) : "";
  }
  return "";
}

void AddOutput(inference::ModelInferResponse& response, const std::string& name,
               const std::string& datatype, std::vector<int64_t> shape,
               std::string raw) {
  auto* output = response.add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  response.add_raw_output_contents(std::move(raw));
}

class FakeKindModel : public ServedModel {
 public:
  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return specs_; }
  const std::vector<TensorSpec>& outputs() const override { return specs_; }
  int64_t pending_requests() const override { return 0; }
  ServedModelStatistics statistics() const override { return {}; }
  casting::Footprint footprint() const override { return {}; }
  int64_t tracked_bytes() const override { return 0; }

  // Requests seen.
  std::atomic<int> calls{0};

 protected:
  void AddInput(const std::string& name, inference::DataType type) {
    auto* input = config_.add_input();
    input->set_name(name);
    input->set_data_type(type);
  }
  void AddOutputSpec(const std::string& name, inference::DataType type) {
    auto* output = config_.add_output();
    output->set_name(name);
    output->set_data_type(type);
  }
  inference::ModelConfig config_;
  std::vector<TensorSpec> specs_;
};

// Every string of BYTES input `name`, in order.
std::vector<std::string> InputStrings(
    const inference::ModelInferRequest& request, const std::string& name) {
  std::vector<std::string> strings;
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (request.inputs(i).name() != name) continue;
    absl::string_view raw = request.raw_input_contents(i);
    while (raw.size() >= 4) {
      uint32_t length = 0;
      std::memcpy(&length, raw.data(), 4);
      strings.emplace_back(raw.substr(4, length));
      raw.remove_prefix(4 + std::min<size_t>(length, raw.size() - 4));
    }
  }
  return strings;
}

// "text" [n, 1] -> sentence_embedding [n, 4]: [3, 4, 0, 0] / 5 (a unit
// vector), or [len, 1, 1, 1] unnormalised for texts starting with "raw";
// prompt_tokens is the texts' length. Token ids: the embedding of their
// count. Records each request's batch size.
class FakeEmbedder : public FakeKindModel {
 public:
  FakeEmbedder() {
    config_.set_name("embedder");
    config_.set_max_batch_size(8);
    AddInput("text", inference::TYPE_STRING);
    AddInput("input_ids", inference::TYPE_INT64);
    AddOutputSpec("sentence_embedding", inference::TYPE_FP32);
  }
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override {
    ++calls;
    const inference::ModelInferRequest& request = *call.request;
    std::vector<std::string> texts = InputStrings(request, "text");
    if (request.inputs(0).name() == "input_ids") {
      EXPECT_EQ(request.inputs(0).shape(0), 1);
      texts = {std::string(request.inputs(0).shape(1), 'x')};
    } else {
      // [n, 1]: batching, n within max_batch_size.
      EXPECT_EQ(request.inputs(0).shape_size(), 2);
      EXPECT_EQ(request.inputs(0).shape(0), static_cast<int64_t>(texts.size()));
      EXPECT_LE(texts.size(), 8u);
    }
    {
      absl::MutexLock lock(&mutex);
      batch_sizes.push_back(static_cast<int>(texts.size()));
    }
    std::vector<float> embeddings;
    int64_t prompt_tokens = 0;
    for (const std::string& text : texts) {
      std::vector<float> embedding = {0.6f, 0.8f, 0, 0};
      if (absl::StartsWith(text, "raw")) {
        embedding = {static_cast<float>(text.size()), 1, 1, 1};
      }
      embeddings.insert(embeddings.end(), embedding.begin(), embedding.end());
      prompt_tokens += static_cast<int64_t>(text.size());
    }
    AddOutput(*call.response, "sentence_embedding", "FP32",
              {static_cast<int64_t>(texts.size()), 4},
              std::string(reinterpret_cast<const char*>(embeddings.data()),
                          embeddings.size() * sizeof(float)));
    (*call.response->mutable_parameters())["prompt_tokens"].set_int64_param(
        prompt_tokens);
    done(absl::OkStatus());
  }

  absl::Mutex mutex;
  std::vector<int> batch_sizes ABSL_GUARDED_BY(mutex);
};

// (query, document) -> scores [logit]: the document's length minus 3.
class FakeReranker : public FakeKindModel {
 public:
  FakeReranker() {
    config_.set_name("reranker");
    config_.set_max_batch_size(4);
    AddInput("query", inference::TYPE_STRING);
    AddInput("document", inference::TYPE_STRING);
    AddOutputSpec("scores", inference::TYPE_FP32);
  }
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override {
    ++calls;
    EXPECT_EQ(InputString(*call.request, "query"), "q");
    const float logit =
        static_cast<float>(InputString(*call.request, "document").size()) - 3;
    AddOutput(*call.response, "scores", "FP32", {1, 1},
              std::string(reinterpret_cast<const char*>(&logit), 4));
    done(absl::OkStatus());
  }
};

// The log-probability outputs of the tokens `first`..`first + count - 1` as
// the generation servable gives them: token i is the letter 'a' + i with
// log-probability -(i + 1) / 8, its alternatives "A", "B", ... with -k - 1.
void AddLogprobOutputs(inference::ModelInferResponse& response, int64_t first,
                       int64_t count, int64_t top) {
  std::string logprobs, texts, top_logprobs, top_texts;
  for (int64_t i = first; i < first + count; ++i) {
    const float logprob = -static_cast<float>(i + 1) / 8;
    logprobs.append(reinterpret_cast<const char*>(&logprob), 4);
    texts += RawString(std::string(1, static_cast<char>('a' + i)));
    for (int64_t k = 0; k < top; ++k) {
      const float alternative = -static_cast<float>(k + 1);
      top_logprobs.append(reinterpret_cast<const char*>(&alternative), 4);
      top_texts += RawString(std::string(1, static_cast<char>('A' + k)));
    }
  }
  AddOutput(response, "output_logprobs", "FP32", {count}, logprobs);
  AddOutput(response, "output_tokens", "BYTES", {count}, texts);
  if (top == 0) return;
  AddOutput(response, "output_top_logprobs", "FP32", {count, top},
            top_logprobs);
  AddOutput(response, "output_top_tokens", "BYTES", {count, top}, top_texts);
}

// Generates the letters "abcdefgh..." one token each, up to max_tokens (then
// finish_reason "length"), or up to the prompt's "stop" string ("stop").
// prompt_tokens: the prompt's (or the messages') length. Streams when the
// call has partial_response. With `hold` set, waits (on a thread) until the
// call is cancelled, then fails CANCELLED.
class FakeGenerator : public FakeKindModel {
 public:
  // `text`: with a tokenizer (text_input); else token ids only.
  explicit FakeGenerator(bool chat, bool text = true) {
    config_.set_name("generator");
    config_.mutable_generation()->set_default_max_tokens(4);
    if (text) AddInput("text_input", inference::TYPE_STRING);
    if (chat) AddInput("messages", inference::TYPE_STRING);
    AddInput("input_ids", inference::TYPE_INT64);
    AddOutputSpec("text_output", inference::TYPE_STRING);
    AddOutputSpec("output_ids", inference::TYPE_INT64);
  }
  ~FakeGenerator() override {
    for (std::thread& thread : threads_) thread.join();
  }

  std::atomic<bool> hold{false};
  std::atomic<int> cancelled{0};
  // The last request's parameters and prompt.
  absl::Mutex mutex;
  inference::ModelInferRequest last_request ABSL_GUARDED_BY(mutex);

  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override {
    ++calls;
    {
      absl::MutexLock lock(&mutex);
      last_request = *call.request;
    }
    if (hold) {
      threads_.emplace_back([this, call, done] {
        while (!call.is_cancelled()) absl::SleepFor(absl::Milliseconds(2));
        ++cancelled;
        done(absl::CancelledError("the client went away"));
      });
      return;
    }
    const auto& parameters = call.request->parameters();
    int64_t max_tokens = 4;
    if (auto it = parameters.find("max_tokens"); it != parameters.end()) {
      max_tokens = it->second.int64_param();
    }
    // -1: no logprobs asked.
    int64_t top = -1;
    if (auto it = parameters.find("logprobs");
        it != parameters.end() && it->second.bool_param()) {
      top = parameters.at("top_logprobs").int64_param();
    }
    std::string stop;
    if (auto it = parameters.find("stop"); it != parameters.end()) {
      stop = json::parse(it->second.string_param())[0];
    }
    const std::string prompt =
        call.request->inputs(0).name() == "input_ids"
            ? std::string(call.request->inputs(0).shape(0), 't')
            : InputString(*call.request, call.request->inputs(0).name());
    std::string text;
    std::string finish = "length";
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < max_tokens; ++i) {
      const std::string piece(1, static_cast<char>('a' + i));
      if (!stop.empty() && piece == stop) {
        finish = "stop";
        break;
      }
      text += piece;
      ids.push_back(i);
      if (call.partial_response && i + 1 < max_tokens) {
        inference::ModelInferResponse partial;
        AddOutput(partial, "text_output", "BYTES", {1}, RawString(piece));
        AddOutput(partial, "output_ids", "INT64", {1},
                  std::string(reinterpret_cast<const char*>(&i), 8));
        if (top >= 0) AddLogprobOutputs(partial, i, 1, top);
        call.partial_response(std::move(partial));
      }
    }
    inference::ModelInferResponse& response = *call.response;
    if (call.partial_response) {
      // The last token's piece comes with the final response.
      const bool last_held = finish == "length" && !ids.empty();
      const std::string rest = last_held ? text.substr(text.size() - 1) : "";
      AddOutput(response, "text_output", "BYTES", {1}, RawString(rest));
      const std::vector<int64_t> last =
          last_held ? std::vector<int64_t>{ids.back()} : std::vector<int64_t>{};
      AddOutput(response, "output_ids", "INT64",
                {static_cast<int64_t>(last.size())},
                std::string(reinterpret_cast<const char*>(last.data()),
                            last.size() * 8));
      if (top >= 0) {
        AddLogprobOutputs(response, last.empty() ? 0 : last.back(),
                          static_cast<int64_t>(last.size()), top);
      }
    } else {
      AddOutput(response, "text_output", "BYTES", {1}, RawString(text));
      AddOutput(response, "output_ids", "INT64",
                {static_cast<int64_t>(ids.size())},
                std::string(reinterpret_cast<const char*>(ids.data()),
                            ids.size() * 8));
      if (top >= 0) {
        AddLogprobOutputs(response, 0, static_cast<int64_t>(ids.size()), top);
      }
    }
    (*response.mutable_parameters())["finish_reason"].set_string_param(finish);
    (*response.mutable_parameters())["prompt_tokens"].set_int64_param(
        static_cast<int64_t>(prompt.size()));
    done(absl::OkStatus());
  }

 private:
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------

constexpr char kInferToken[] = "infer-token-0123456789";
constexpr char kAdminOnlyToken[] = "admin-token-0123456789";

struct Reply {
  int status = 0;
  std::string head;
  std::string body;
  json Json() const { return json::parse(body, nullptr, false); }
  json Error() const { return Json()["error"]; }
};

// Undoes chunked transfer encoding.
std::string Dechunk(const std::string& body) {
  std::string out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t line_end = body.find("\r\n", at);
    if (line_end == std::string::npos) break;
    size_t length = 0;
    if (!absl::SimpleHexAtoi(body.substr(at, line_end - at), &length) ||
        length == 0) {
      break;
    }
    out += body.substr(line_end + 2, length);
    at = line_end + 2 + length + 2;
  }
  return out;
}

class OpenAiServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manager_.AddServedModel("embedder", embedder_);
    manager_.AddServedModel("reranker", reranker_);
    manager_.AddServedModel("generator", generator_);
    manager_.AddServedModel("plain", std::make_shared<FakeGenerator>(false));
    manager_.AddServedModel("ids_only",
                            std::make_shared<FakeGenerator>(false, false));
    manager_.AddModel("tensor");
    Start(nullptr);
  }

  void Start(TokenAuthenticator* auth) {
    http_.reset();
    core_ = std::make_unique<InferenceCore>(&ready_, &manager_, 1 << 20, auth,
                                            nullptr);
    service_ = std::make_unique<OpenAiService>(core_.get(), nullptr);
    HttpServerOptions options;
    options.limits.max_body_bytes = 1 << 20;
    auto server = HttpServer::Start("127.0.0.1", 0, options, service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
  }

  void TearDown() override { http_.reset(); }

  std::string RequestText(const std::string& method, const std::string& path,
                          const std::string& body,
                          const std::string& token = "") {
    std::string text = absl::StrCat(method, " ", path,
                                    " HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: close\r\n");
    if (!token.empty()) {
      absl::StrAppend(&text, "Authorization: Bearer ", token, "\r\n");
    }
    if (method == "POST") {
      absl::StrAppend(&text, "Content-Type: application/json\r\n",
                      "Content-Length: ", body.size(), "\r\n");
    }
    return absl::StrCat(text, "\r\n", body);
  }

  Reply Call(const std::string& method, const std::string& path,
             const std::string& body = "", const std::string& token = "") {
    const std::string raw = test_util::Exchange(
        http_->port(), RequestText(method, path, body, token), 10);
    Reply reply;
    const size_t end = raw.find("\r\n\r\n");
    if (raw.size() < 12 || end == std::string::npos) return reply;
    reply.head = raw.substr(0, end);
    reply.body = raw.substr(end + 4);
    if (absl::StrContains(reply.head, "chunked")) {
      reply.body = Dechunk(reply.body);
    }
    absl::SimpleAtoi(raw.substr(9, 3), &reply.status);
    return reply;
  }

  // The data of each server-sent event.
  std::vector<std::string> Events(const Reply& reply) {
    std::vector<std::string> events;
    for (absl::string_view event :
         absl::StrSplit(reply.body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
      events.emplace_back(event.substr(6));
    }
    return events;
  }

  std::atomic<bool> ready_{true};
  testing::FakeModelManager manager_;
  std::shared_ptr<FakeEmbedder> embedder_ = std::make_shared<FakeEmbedder>();
  std::shared_ptr<FakeReranker> reranker_ = std::make_shared<FakeReranker>();
  std::shared_ptr<FakeGenerator> generator_ =
      std::make_shared<FakeGenerator>(true);
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<OpenAiService> service_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(OpenAiServiceTest, ListsTheModelsThatAnswerAnEndpoint) {
  Reply list = Call("GET", "/v1/models");
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(list.Json()["object"], "list");
  std::vector<std::string> ids;
  const json models = list.Json()["data"];
  for (const json& model : models) {
    ids.push_back(model["id"]);
    EXPECT_EQ(model["object"], "model");
    EXPECT_EQ(model["owned_by"], "castserve");
    EXPECT_GT(model["created"].get<int64_t>(), 1700000000);
  }
  EXPECT_THAT(
      ids, ::testing::UnorderedElementsAre("embedder", "reranker", "generator",
                                           "plain", "ids_only"))
      << list.body;
  Reply one = Call("GET", "/v1/models/generator");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.Json()["id"], "generator");
  Reply ghost = Call("GET", "/v1/models/ghost");
  EXPECT_EQ(ghost.status, 404);
  EXPECT_EQ(ghost.Error()["code"], "model_not_found");
  EXPECT_EQ(ghost.Error()["type"], "invalid_request_error");
  EXPECT_EQ(Call("GET", "/v1/models/tensor").status, 404);
}

TEST_F(OpenAiServiceTest, RoutesAndMethods) {
  Reply unknown = Call("GET", "/v1/files");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(unknown.Error()["message"].is_string());
  Reply wrong = Call("GET", "/v1/embeddings");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_THAT(wrong.head, HasSubstr("Allow: POST"));
  EXPECT_EQ(Call("POST", "/v1/models", "{}").status, 405);
}

TEST_F(OpenAiServiceTest, EmbeddingsTextsGoAsBatchedRequests) {
  Reply reply = Call("POST", "/v1/embeddings",
                     R"({"model": "embedder", "input": ["ab", "rawxy"]})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = reply.Json();
  EXPECT_EQ(embedder_->calls, 1);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["model"], "embedder");
  ASSERT_EQ(body["data"].size(), 2);
  EXPECT_EQ(body["data"][1]["index"], 1);
  EXPECT_EQ(body["data"][0]["object"], "embedding");
  EXPECT_NEAR(body["data"][0]["embedding"][1].get<double>(), 0.8, 1e-6);
  EXPECT_EQ(body["data"][1]["embedding"][0].get<double>(), 5.0);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(body["usage"]["total_tokens"], 7);

  // Ten texts and a token array between them: texts in requests of at most
  // max_batch_size (8), the token array alone, the order kept.
  Reply mixed = Call("POST", "/v1/embeddings",
                     R"({"model": "embedder", "input": ["a", "raw1", [7, 8],)"
                     R"( "b", "c", "d", "e", "f", "g", "h", "raw22", "i"]})");
  ASSERT_EQ(mixed.status, 200) << mixed.body;
  const json data = mixed.Json()["data"];
  ASSERT_EQ(data.size(), 12);
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i]["index"], i);
  EXPECT_EQ(data[1]["embedding"][0].get<double>(), 4.0);
  EXPECT_NEAR(data[2]["embedding"][1].get<double>(), 0.8, 1e-6);
  EXPECT_EQ(data[10]["embedding"][0].get<double>(), 5.0);
  EXPECT_EQ(mixed.Json()["usage"]["prompt_tokens"], 1 + 4 + 2 + 7 + 5 + 1);
  absl::MutexLock lock(&embedder_->mutex);
  EXPECT_EQ(embedder_->batch_sizes, (std::vector<int>{2, 2, 1, 8, 1}));
}

TEST_F(OpenAiServiceTest, EmbeddingsTokensBase64AndDimensions) {
  Reply tokens = Call("POST", "/v1/embeddings",
                      R"({"model": "embedder", "input": [5, 6, 7]})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(tokens.Json()["usage"]["prompt_tokens"], 3);

  Reply base64 = Call("POST", "/v1/embeddings",
                      R"({"model": "embedder", "input": "ab",)"
                      R"( "encoding_format": "base64"})");
  ASSERT_EQ(base64.status, 200) << base64.body;
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      base64.Json()["data"][0]["embedding"].get<std::string>(), &bytes));
  ASSERT_EQ(bytes.size(), 16);
  float values[4];
  std::memcpy(values, bytes.data(), 16);
  EXPECT_FLOAT_EQ(values[0], 0.6f);
  EXPECT_FLOAT_EQ(values[1], 0.8f);

  // A unit embedding is normalised again after truncation; another is not.
  Reply unit = Call("POST", "/v1/embeddings",
                    R"({"model": "embedder", "input": "ab", "dimensions": 1})");
  ASSERT_EQ(unit.status, 200) << unit.body;
  EXPECT_EQ(unit.Json()["data"][0]["embedding"], json({1.0}));
  Reply raw = Call("POST", "/v1/embeddings",
                   R"({"model": "embedder", "input": "raw", "dimensions": 2})");
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(raw.Json()["data"][0]["embedding"], json({3.0, 1.0}));

  Reply too_many =
      Call("POST", "/v1/embeddings",
           R"({"model": "embedder", "input": "ab", "dimensions": 5})");
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(too_many.Error()["param"], "dimensions");
}

TEST_F(OpenAiServiceTest, ModelsOfAnotherKindAreRefusedNamingTheKind) {
  Reply embed =
      Call("POST", "/v1/embeddings", R"({"model": "generator", "input": "x"})");
  EXPECT_EQ(embed.status, 400);
  EXPECT_EQ(embed.Error()["param"], "model");
  EXPECT_THAT(embed.Error()["message"].get<std::string>(),
              HasSubstr("generation model"));
  Reply rerank = Call("POST", "/v1/rerank",
                      R"({"model": "embedder", "query": "q",)"
                      R"( "documents": ["a"]})");
  EXPECT_EQ(rerank.status, 400);
  EXPECT_THAT(rerank.Error()["message"].get<std::string>(),
              HasSubstr("sentence embedding model"));
  Reply chat = Call("POST", "/v1/chat/completions",
                    R"({"model": "plain", "messages":)"
                    R"( [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(chat.Error()["param"], "messages");
  EXPECT_THAT(chat.Error()["message"].get<std::string>(),
              HasSubstr("no chat template"));
  Reply missing =
      Call("POST", "/v1/completions", R"({"model": "ghost", "prompt": "x"})");
  EXPECT_EQ(missing.status, 404);
}

TEST_F(OpenAiServiceTest, BadBodiesAre400NamingTheField) {
  Reply reply = Call("POST", "/v1/chat/completions",
                     R"({"model": "generator", "messages":)"
                     R"( [{"role": "user", "content": "x"}], "logprobs": true,)"
                     R"( "top_logprobs": 21})");
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.Error()["param"], "top_logprobs");
  EXPECT_EQ(reply.Error()["type"], "invalid_request_error");
  EXPECT_TRUE(reply.Error().contains("code"));
  Reply not_json = Call("POST", "/v1/embeddings", "{");
  EXPECT_EQ(not_json.status, 400);
  EXPECT_TRUE(not_json.Error()["param"].is_null());
  EXPECT_EQ(generator_->calls, 0);
}

TEST_F(OpenAiServiceTest, RerankSortsBySigmoidOfTheLogit) {
  Reply reply = Call("POST", "/rerank",
                     R"({"model": "reranker", "query": "q",)"
                     R"( "documents": ["abc", "abcdef", "a"], "top_n": 2,)"
                     R"( "return_documents": true})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reranker_->calls, 3);
  const json results = reply.Json().at("results");
  ASSERT_EQ(results.size(), 2);
  EXPECT_EQ(results[0]["index"], 1);
  EXPECT_NEAR(results[0]["relevance_score"].get<double>(),
              1 / (1 + std::exp(-3.0)), 1e-6);
  EXPECT_EQ(results[0]["document"]["text"], "abcdef");
  EXPECT_EQ(results[1]["index"], 0);
  EXPECT_NEAR(results[1]["relevance_score"].get<double>(), 0.5, 1e-6);
  Reply plain = Call("POST", "/v1/rerank",
                     R"({"model": "reranker", "query": "q",)"
                     R"( "documents": ["a"]})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_FALSE(plain.Json()["results"][0].contains("document"));
}

TEST_F(OpenAiServiceTest, ChatCompletionUnary) {
  Reply reply = Call("POST", "/v1/chat/completions",
                     R"({"model": "generator", "messages":)"
                     R"( [{"role": "user", "content": "hi"}], "max_tokens": 3,)"
                     R"( "temperature": 0, "seed": 11, "stop": ["q"]})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = reply.Json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(body["id"].get<std::string>(), "chatcmpl-"));
  EXPECT_EQ(body["model"], "generator");
  ASSERT_EQ(body["choices"].size(), 1);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "abc");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  absl::MutexLock lock(&generator_->mutex);
  const inference::ModelInferRequest& sent = generator_->last_request;
  EXPECT_EQ(sent.inputs(0).name(), "messages");
  EXPECT_EQ(json::parse(InputString(sent, "messages")),
            json::parse(R"([{"role": "user", "content": "hi"}])"));
  EXPECT_EQ(sent.parameters().at("max_tokens").int64_param(), 3);
  EXPECT_EQ(sent.parameters().at("temperature").double_param(), 0);
  EXPECT_EQ(sent.parameters().at("seed").int64_param(), 11);
  EXPECT_EQ(sent.parameters().at("stop").string_param(), R"(["q"])");
  EXPECT_EQ(body["usage"]["prompt_tokens"],
            InputString(sent, "messages").size());
}

TEST_F(OpenAiServiceTest, CompletionsNChoicesEachWithItsOwnSeed) {
  Reply reply = Call("POST", "/v1/completions",
                     R"({"model": "generator", "prompt": "Once", "n": 3,)"
                     R"( "seed": 100, "stop": "c", "max_tokens": 6})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json body = reply.Json();
  EXPECT_EQ(body["object"], "text_completion");
  ASSERT_EQ(body["choices"].size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["text"], "ab");
    EXPECT_EQ(body["choices"][i]["finish_reason"], "stop");
  }
  EXPECT_EQ(generator_->calls, 3);
  // The prompt counts once; each choice's tokens count.
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["usage"]["total_tokens"], 10);
}

TEST_F(OpenAiServiceTest, ChatStreamsChunksThenUsageThenDone) {
  Reply reply = Call("POST", "/v1/chat/completions",
                     R"({"model": "generator", "messages":)"
                     R"( [{"role": "user", "content": "hi"}], "max_tokens": 3,)"
                     R"( "stream": true, "stream_options":)"
                     R"( {"include_usage": true}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_THAT(reply.head, HasSubstr("text/event-stream"));
  std::vector<std::string> events = Events(reply);
  ASSERT_GE(events.size(), 4);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  std::string finish;
  bool role = false;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& choice = chunk["choices"][0];
    if (choice["delta"].contains("role")) role = true;
    if (choice["delta"].contains("content"))
      content += choice["delta"]["content"];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_TRUE(role);
  EXPECT_EQ(content, "abc");
  EXPECT_EQ(finish, "length");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

TEST_F(OpenAiServiceTest, CompletionsStreamWithoutUsage) {
  Reply reply = Call("POST", "/v1/completions",
                     R"({"model": "generator", "prompt": [1, 2],)"
                     R"( "max_tokens": 2, "stream": true})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<std::string> events = Events(reply);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_FALSE(chunk.contains("usage"));
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "ab");
  absl::MutexLock lock(&generator_->mutex);
  EXPECT_EQ(generator_->last_request.inputs(0).name(), "input_ids");
}

TEST_F(OpenAiServiceTest, CompletionsLogprobsUnaryAndStreamed) {
  Reply unary = Call("POST", "/v1/completions",
                     R"({"model": "generator", "prompt": "Once",)"
                     R"( "max_tokens": 3, "logprobs": 2,)"
                     R"( "presence_penalty": 0.5, "frequency_penalty": -1})");
  ASSERT_EQ(unary.status, 200) << unary.body;
  const json logprobs = unary.Json()["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], json({"a", "b", "c"}));
  ASSERT_EQ(logprobs["token_logprobs"].size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(logprobs["token_logprobs"][i].get<float>(), -(i + 1) / 8.f);
    EXPECT_EQ(logprobs["top_logprobs"][i], json({{"A", -1.0}, {"B", -2.0}}));
  }
  EXPECT_EQ(logprobs["text_offset"], json({0, 1, 2}));
  {
    absl::MutexLock lock(&generator_->mutex);
    const auto& sent = generator_->last_request.parameters();
    EXPECT_TRUE(sent.at("logprobs").bool_param());
    EXPECT_EQ(sent.at("top_logprobs").int64_param(), 2);
    EXPECT_EQ(sent.at("presence_penalty").double_param(), 0.5);
    EXPECT_EQ(sent.at("frequency_penalty").double_param(), -1);
  }
  Reply streamed = Call("POST", "/v1/completions",
                        R"({"model": "generator", "prompt": "Once",)"
                        R"( "max_tokens": 3, "logprobs": 0, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  json tokens = json::array();
  json offsets = json::array();
  for (const std::string& event : Events(streamed)) {
    if (event == "[DONE]") break;
    const json chunk = json::parse(event);
    const json& chunk_logprobs = chunk["choices"][0]["logprobs"];
    if (chunk_logprobs.is_null()) continue;  // The finish_reason chunk.
    for (const json& token : chunk_logprobs["tokens"]) tokens.push_back(token);
    for (const json& offset : chunk_logprobs["text_offset"]) {
      offsets.push_back(offset);
    }
    for (const json& top : chunk_logprobs["top_logprobs"]) {
      EXPECT_TRUE(top.empty());
    }
  }
  EXPECT_EQ(tokens, json({"a", "b", "c"}));
  EXPECT_EQ(offsets, json({0, 1, 2}));
  // A model without a tokenizer has no text for its tokens.
  Reply ids_only = Call("POST", "/v1/completions",
                        R"({"model": "ids_only", "prompt": [1, 2],)"
                        R"( "logprobs": 1})");
  EXPECT_EQ(ids_only.status, 400);
  EXPECT_EQ(ids_only.Error()["param"], "logprobs");
  // Not asked: null, and nothing sent to the model.
  Reply plain = Call("POST", "/v1/completions",
                     R"({"model": "generator", "prompt": "Once"})");
  EXPECT_TRUE(plain.Json()["choices"][0]["logprobs"].is_null());
  absl::MutexLock lock(&generator_->mutex);
  EXPECT_FALSE(generator_->last_request.parameters().contains("logprobs"));
  EXPECT_FALSE(
      generator_->last_request.parameters().contains("presence_penalty"));
}

TEST_F(OpenAiServiceTest, ChatLogprobsContentUnaryAndStreamed) {
  const std::string body =
      R"({"model": "generator", "messages": [{"role": "user", "content":)"
      R"( "hi"}], "max_tokens": 2, "logprobs": true, "top_logprobs": 1)";
  Reply unary = Call("POST", "/v1/chat/completions", body + "}");
  ASSERT_EQ(unary.status, 200) << unary.body;
  const json content = unary.Json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2);
  EXPECT_EQ(content[1]["token"], "b");
  EXPECT_FLOAT_EQ(content[1]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(content[1]["bytes"], json({98}));
  EXPECT_EQ(content[1]["top_logprobs"],
            json::parse(R"([{"token": "A", "logprob": -1.0, "bytes": [65]}])"));
  Reply streamed =
      Call("POST", "/v1/chat/completions", body + R"(, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  json streamed_content = json::array();
  for (const std::string& event : Events(streamed)) {
    if (event == "[DONE]") break;
    const json chunk = json::parse(event);
    const json& logprobs = chunk["choices"][0]["logprobs"];
    if (logprobs.is_null()) continue;
    for (const json& token : logprobs["content"]) {
      streamed_content.push_back(token);
    }
  }
  EXPECT_EQ(streamed_content, content);
}

TEST_F(OpenAiServiceTest, AClientThatGoesAwayCancelsItsSequences) {
  generator_->hold = true;
  const int fd = test_util::ConnectLocal(http_->port(), 10);
  ASSERT_GE(fd, 0);
  const std::string request =
      RequestText("POST", "/v1/completions",
                  R"({"model": "generator", "prompt": "x", "n": 2,)"
                  R"( "stream": true})");
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (generator_->calls < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  close(fd);
  while (generator_->cancelled < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(generator_->cancelled, 2);
}

TEST_F(OpenAiServiceTest, TokensAndScopesAsOnKServe) {
  // Tokens: one with the infer scope, one with admin only.
  platform::FakeFileSystem files;
  files.AddFile("/tokens", absl::StrCat(kInferToken, " infer\n",
                                        kAdminOnlyToken, " admin\n"));
  auto auth = TokenAuthenticator::Open("/tokens", &files);
  ASSERT_TRUE(auth.ok()) << auth.status();
  Start(auth->get());
  const std::string body = R"({"model": "embedder", "input": "ab"})";
  Reply none = Call("POST", "/v1/embeddings", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.Error()["type"], "authentication_error");
  EXPECT_THAT(none.head, HasSubstr("WWW-Authenticate: Bearer"));
  EXPECT_EQ(Call("POST", "/v1/embeddings", body, kAdminOnlyToken).status, 403);
  EXPECT_EQ(Call("GET", "/v1/models", "", kAdminOnlyToken).status, 403);
  EXPECT_EQ(Call("POST", "/v1/embeddings", body, kInferToken).status, 200);
  EXPECT_EQ(Call("GET", "/v1/models", "", kInferToken).status, 200);
  EXPECT_EQ(embedder_->calls, 1);
}

}  // namespace
}  // namespace castserve::openai
