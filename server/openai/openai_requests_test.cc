#include "server/openai/openai_requests.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace castserve::openai {
namespace {

// The field a refused body is refused for; "" when it was accepted.
template <typename Decoded>
std::string RefusedField(const absl::StatusOr<Decoded>& decoded) {
  if (decoded.ok()) return "";
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  return FieldOf(decoded.status()).value_or("<no field>");
}

TEST(OpenAiRequestsTest, EmbeddingsTakeEveryInputForm) {
  absl::StatusOr<EmbeddingsRequest> one =
      DecodeEmbeddingsRequest(R"({"model": "m", "input": "hello"})");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->inputs.size(), 1);
  EXPECT_EQ(one->inputs[0].text, "hello");
  EXPECT_FALSE(one->base64);

  absl::StatusOr<EmbeddingsRequest> many = DecodeEmbeddingsRequest(
      R"({"model": "m", "input": ["a", "b"], "encoding_format": "base64",)"
      R"( "dimensions": 8, "user": "u"})");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(many->inputs.size(), 2);
  EXPECT_TRUE(many->base64);
  EXPECT_EQ(many->dimensions, 8);

  absl::StatusOr<EmbeddingsRequest> tokens =
      DecodeEmbeddingsRequest(R"({"model": "m", "input": [101, 7, 102]})");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->inputs.size(), 1);
  EXPECT_TRUE(tokens->inputs[0].is_tokens);
  EXPECT_EQ(tokens->inputs[0].tokens, (std::vector<int64_t>{101, 7, 102}));

  absl::StatusOr<EmbeddingsRequest> arrays = DecodeEmbeddingsRequest(
      R"({"model": "m", "input": [[1, 2], [3]], "encoding_format": null})");
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  EXPECT_EQ(arrays->inputs.size(), 2);
  EXPECT_EQ(arrays->inputs[1].tokens, std::vector<int64_t>{3});
}

TEST(OpenAiRequestsTest, EveryBadEmbeddingsFieldIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x"})", "model"},
      {R"({"model": "m"})", "input"},
      {R"({"model": 3, "input": "x"})", "model"},
      {R"({"model": "", "input": "x"})", "model"},
      {R"({"model": "m", "input": 5})", "input"},
      {R"({"model": "m", "input": []})", "input"},
      {R"({"model": "m", "input": ["a", 5]})", "input[1]"},
      {R"({"model": "m", "input": [1, "a"]})", "input[1]"},
      {R"({"model": "m", "input": [1, -2]})", "input[1]"},
      {R"({"model": "m", "input": [[1], []]})", "input[1]"},
      {R"({"model": "m", "input": "x", "encoding_format": "int8"})",
       "encoding_format"},
      {R"({"model": "m", "input": "x", "dimensions": 0})", "dimensions"},
      {R"({"model": "m", "input": "x", "dimensions": 1.5})", "dimensions"},
      {R"({"model": "m", "input": "x", "dimensions": 18446744073709551615})",
       "dimensions"},
      {R"({"model": "m", "input": "x", "user": 1})", "user"},
  };
  for (const auto& [body, field] : cases) {
    EXPECT_EQ(RefusedField(DecodeEmbeddingsRequest(body)), field) << body;
  }
}

TEST(OpenAiRequestsTest, BodiesThatAreNotObjectsAreRefused) {
  for (const char* body : {"", "[]", "\"x\"", "{", "{\"model\": \"m\",}"}) {
    absl::StatusOr<EmbeddingsRequest> decoded = DecodeEmbeddingsRequest(body);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
        << body;
  }
}

TEST(OpenAiRequestsTest, SizesAreBounded) {
  std::string many = R"({"model": "m", "input": [)";
  for (size_t i = 0; i <= kMaxInputs; ++i) {
    absl::StrAppend(&many, i == 0 ? "" : ",", "\"x\"");
  }
  absl::StrAppend(&many, "]}");
  EXPECT_EQ(RefusedField(DecodeEmbeddingsRequest(many)), "input");

  const std::string long_text(kMaxInputBytes + 1, 'a');
  EXPECT_EQ(RefusedField(DecodeEmbeddingsRequest(absl::StrCat(
                R"({"model": "m", "input": ")", long_text, "\"}"))),
            "input");

  std::string deep = R"({"model": "m", "input": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_FALSE(DecodeEmbeddingsRequest(deep).ok());
}

TEST(OpenAiRequestsTest, ChatTakesItsParameters) {
  absl::StatusOr<CompletionRequest> chat = DecodeCompletionRequest(
      R"({"model": "m", "messages": [{"role": "system", "content": "s"},)"
      R"( {"role": "user", "content": [{"type": "text", "text": "hi"}]}],)"
      R"( "max_completion_tokens": 5, "temperature": 0, "top_p": 0.5,)"
      R"( "seed": 7, "stop": ["a", "b"], "n": 3, "stream": true,)"
      R"( "stream_options": {"include_usage": true}, "logprobs": true,)"
      R"( "top_logprobs": 20, "presence_penalty": -2,)"
      R"( "frequency_penalty": 1.25,)"
      R"( "response_format": {"type": "text"}, "user": "u"})",
      /*chat=*/true);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->chat);
  EXPECT_EQ(chat->max_tokens, 5);
  EXPECT_EQ(chat->temperature, 0);
  EXPECT_EQ(chat->top_p, 0.5);
  EXPECT_EQ(chat->seed, 7);
  EXPECT_EQ(chat->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(chat->n, 3);
  EXPECT_TRUE(chat->stream);
  EXPECT_TRUE(chat->include_usage);
  EXPECT_TRUE(chat->logprobs);
  EXPECT_EQ(chat->top_logprobs, 20);
  EXPECT_EQ(chat->presence_penalty, -2);
  EXPECT_EQ(chat->frequency_penalty, 1.25);
  EXPECT_NE(chat->messages_json.find("\"role\":\"system\""), std::string::npos);
}

TEST(OpenAiRequestsTest, CompletionsDefaultsAreOpenAIs) {
  absl::StatusOr<CompletionRequest> completion = DecodeCompletionRequest(
      R"({"model": "m", "prompt": "Once", "stop": "."})", /*chat=*/false);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->temperature, 1);
  EXPECT_EQ(completion->top_p, 1);
  EXPECT_EQ(completion->n, 1);
  EXPECT_FALSE(completion->max_tokens.has_value());
  EXPECT_EQ(completion->stop, std::vector<std::string>{"."});
  ASSERT_EQ(completion->prompts.size(), 1);
  EXPECT_EQ(completion->prompts[0].text, "Once");
  EXPECT_FALSE(completion->logprobs);
  EXPECT_EQ(completion->presence_penalty, 0);
  EXPECT_EQ(completion->frequency_penalty, 0);
}

// Completions' logprobs is a count: 0 asks for the chosen tokens only.
TEST(OpenAiRequestsTest, CompletionsLogprobsCountsTheAlternatives) {
  for (int top : {0, 3, 20}) {
    absl::StatusOr<CompletionRequest> completion = DecodeCompletionRequest(
        absl::StrCat(R"({"model": "m", "prompt": "x", "logprobs": )", top,
                     R"(, "presence_penalty": 2, "frequency_penalty": -0.5})"),
        /*chat=*/false);
    ASSERT_TRUE(completion.ok()) << completion.status();
    EXPECT_TRUE(completion->logprobs);
    EXPECT_EQ(completion->top_logprobs, top);
    EXPECT_EQ(completion->presence_penalty, 2);
    EXPECT_EQ(completion->frequency_penalty, -0.5);
  }
  absl::StatusOr<CompletionRequest> off = DecodeCompletionRequest(
      R"({"model": "m", "prompt": "x", "logprobs": null})", /*chat=*/false);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->logprobs);
}

TEST(OpenAiRequestsTest, EveryBadCompletionFieldIsNamed) {
  const std::string kChat =
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": "m"})", "messages"},
      {kChat + R"("temperature": 3})", "temperature"},
      {kChat + R"("temperature": "hot"})", "temperature"},
      {kChat + R"("top_p": 0})", "top_p"},
      {kChat + R"("seed": -1})", "seed"},
      {kChat + R"("max_tokens": 0})", "max_tokens"},
      {kChat + R"("max_completion_tokens": 1.5})", "max_completion_tokens"},
      {kChat + R"("n": 9})", "n"},
      {kChat + R"("stop": 5})", "stop"},
      {kChat + R"("stop": ["a", ""]})", "stop[1]"},
      {kChat + R"("stream": "yes"})", "stream"},
      {kChat + R"("stream_options": {"include_usage": true}})",
       "stream_options"},
      {kChat + R"("stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {kChat + R"("logprobs": 1})", "logprobs"},
      {kChat + R"("top_logprobs": 2})", "top_logprobs"},
      {kChat + R"("logprobs": false, "top_logprobs": 2})", "top_logprobs"},
      {kChat + R"("logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {kChat + R"("logprobs": true, "top_logprobs": -1})", "top_logprobs"},
      {kChat + R"("presence_penalty": 2.5})", "presence_penalty"},
      {kChat + R"("presence_penalty": "high"})", "presence_penalty"},
      {kChat + R"("frequency_penalty": -3})", "frequency_penalty"},
      {kChat + R"("logit_bias": {"1": 2}})", "logit_bias"},
      {kChat + R"("response_format": {"type": "json_object"}})",
       "response_format"},
      {kChat + R"("tools": [{"type": "function"}]})", "tools"},
      {kChat + R"("tool_choice": "auto"})", "tool_choice"},
      {kChat + R"("functions": [{"name": "f"}]})", "functions"},
      {kChat + R"("function_call": "auto"})", "function_call"},
      {kChat + R"("modalities": ["text", "audio"]})", "modalities"},
      {kChat + R"("audio": {"voice": "x"}})", "audio"},
      {kChat + R"("prediction": {"type": "content"}})", "prediction"},
      {R"({"model": "m", "messages": []})", "messages"},
      {R"({"model": "m", "messages": "hi"})", "messages"},
      {R"({"model": "m", "messages": [5]})", "messages[0]"},
      {R"({"model": "m", "messages": [{"role": "king", "content": "x"}]})",
       "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "user"}]})",
       "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 3}]})",
       "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content":)"
       R"( [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type"},
  };
  for (const auto& [body, field] : cases) {
    EXPECT_EQ(RefusedField(DecodeCompletionRequest(body, /*chat=*/true)), field)
        << body;
  }
  const std::vector<std::pair<std::string, std::string>> completions = {
      {R"({"model": "m"})", "prompt"},
      {R"({"model": "m", "prompt": "x", "echo": true})", "echo"},
      {R"({"model": "m", "prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"model": "m", "prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"model": "m", "prompt": "x", "frequency_penalty": 2.1})",
       "frequency_penalty"},
      {R"({"model": "m", "prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"model": "m", "prompt": "x", "best_of": 2})", "best_of"},
      {R"({"model": "m", "prompt": "x", "messages": []})", "messages"},
      {R"({"model": "m", "prompt": ["a", "b", "c"], "n": 3})", "n"},
  };
  for (const auto& [body, field] : completions) {
    EXPECT_EQ(RefusedField(DecodeCompletionRequest(body, /*chat=*/false)),
              field)
        << body;
  }
}

// OpenAI's servers ignore fields they do not know, and so does castserve; the
// API's own fields that would change the answer are refused above.
TEST(OpenAiRequestsTest, UnknownFieldsAreIgnored) {
  absl::StatusOr<EmbeddingsRequest> embeddings = DecodeEmbeddingsRequest(
      R"({"model": "m", "input": "x", "truncate": true, "extra": {"a": 1}})");
  ASSERT_TRUE(embeddings.ok()) << embeddings.status();
  EXPECT_EQ(embeddings->inputs.size(), 1);

  absl::StatusOr<CompletionRequest> chat = DecodeCompletionRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],)"
      R"( "store": false, "metadata": {"k": "v"}, "tools": [],)"
      R"( "tool_choice": "none", "stream": true,)"
      R"( "stream_options": {"include_usage": true, "later": 1}})",
      /*chat=*/true);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->include_usage);

  absl::StatusOr<RerankRequest> rerank = DecodeRerankRequest(
      R"({"model": "m", "query": "q", "documents": ["d"], "raw_scores": 1})");
  ASSERT_TRUE(rerank.ok()) << rerank.status();
}

TEST(OpenAiRequestsTest, RerankFields) {
  absl::StatusOr<RerankRequest> rerank = DecodeRerankRequest(
      R"({"model": "r", "query": "q", "documents": ["a", "b"], "top_n": 1,)"
      R"( "return_documents": true})");
  ASSERT_TRUE(rerank.ok()) << rerank.status();
  EXPECT_EQ(rerank->documents.size(), 2);
  EXPECT_EQ(rerank->top_n, 1);
  EXPECT_TRUE(rerank->return_documents);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": "r", "documents": ["a"]})", "query"},
      {R"({"model": "r", "query": "q"})", "documents"},
      {R"({"model": "r", "query": "q", "documents": []})", "documents"},
      {R"({"model": "r", "query": "q", "documents": ["a", 1]})",
       "documents[1]"},
      {R"({"model": "r", "query": "q", "documents": ["a"], "top_n": 0})",
       "top_n"},
  };
  for (const auto& [body, field] : cases) {
    EXPECT_EQ(RefusedField(DecodeRerankRequest(body)), field) << body;
  }
}

}  // namespace
}  // namespace castserve::openai
