#include "server/openai/openai_logprobs.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

std::string RawStrings(const std::vector<std::string>& strings) {
  std::string raw;
  for (const std::string& s : strings) {
    const auto length = static_cast<uint32_t>(s.size());
    raw.append(reinterpret_cast<const char*>(&length), 4);
    raw += s;
  }
  return raw;
}

std::string RawFloats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(float));
}

void Add(inference::ModelInferResponse& response, const std::string& name,
         const std::string& datatype, std::vector<int64_t> shape,
         std::string raw) {
  auto* output = response.add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  response.add_raw_output_contents(std::move(raw));
}

// Two tokens ("é" of two bytes, then "x"), two alternatives each; the
// second token's alternatives decode alike and one is ruled out (-inf).
inference::ModelInferResponse Response() {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  inference::ModelInferResponse response;
  Add(response, "output_logprobs", "FP32", {2}, RawFloats({-0.5f, -kInf}));
  Add(response, "output_tokens", "BYTES", {2}, RawStrings({"\xC3\xA9", "x"}));
  Add(response, "output_top_logprobs", "FP32", {2, 2},
      RawFloats({-0.5f, -1.5f, -0.25f, -kInf}));
  Add(response, "output_top_tokens", "BYTES", {2, 2},
      RawStrings({"\xC3\xA9", "e", "y", "y"}));
  return response;
}

TEST(OpenAiLogprobsTest, ChatContentHasBytesAndFiniteLogprobs) {
  absl::StatusOr<AnswerLogprobs> logprobs = ReadLogprobs(Response(), 2);
  ASSERT_TRUE(logprobs.ok()) << logprobs.status();
  const json content = ChatLogprobsJson(*logprobs)["content"];
  ASSERT_EQ(content.size(), 2);
  EXPECT_EQ(content[0]["token"], "\xC3\xA9");
  EXPECT_EQ(content[0]["bytes"], json({0xC3, 0xA9}));
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "e");
  EXPECT_FLOAT_EQ(content[0]["top_logprobs"][1]["logprob"].get<float>(), -1.5f);
  // JSON has no -infinity: vLLM's floor.
  EXPECT_EQ(content[1]["logprob"].get<float>(), -9999.0f);
  EXPECT_EQ(content[1]["top_logprobs"][1]["logprob"].get<float>(), -9999.0f);
}

TEST(OpenAiLogprobsTest, CompletionOffsetsCountCharactersAcrossCalls) {
  absl::StatusOr<AnswerLogprobs> logprobs = ReadLogprobs(Response(), 2);
  ASSERT_TRUE(logprobs.ok()) << logprobs.status();
  int64_t offset = 3;
  const json answer = CompletionLogprobsJson(*logprobs, &offset);
  EXPECT_EQ(answer["tokens"], json({"\xC3\xA9", "x"}));
  // "é" is one character (two bytes).
  EXPECT_EQ(answer["text_offset"], json({3, 4}));
  EXPECT_EQ(offset, 5);
  // Alternatives that decode alike keep the more probable.
  EXPECT_EQ(answer["top_logprobs"][1], json({{"y", -0.25f}}));
  EXPECT_EQ(answer["top_logprobs"][0].size(), 2);
}

TEST(OpenAiLogprobsTest, DisagreeingOutputsAreInternal) {
  inference::ModelInferResponse response = Response();
  EXPECT_EQ(ReadLogprobs(response, 3).status().code(),
            absl::StatusCode::kInternal);
  inference::ModelInferResponse missing;
  EXPECT_EQ(ReadLogprobs(missing, 0).status().code(),
            absl::StatusCode::kInternal);
  // Without alternatives asked, the top outputs are not read.
  absl::StatusOr<AnswerLogprobs> chosen = ReadLogprobs(response, 0);
  ASSERT_TRUE(chosen.ok());
  EXPECT_TRUE(chosen->tokens[0].top.empty());
}

}  // namespace
}  // namespace castserve::openai
