#include "server/openai/openai_logprobs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

// JSON has no -infinity: a token the model rules out gets vLLM's floor.
constexpr float kLowestLogprob = -9999.0f;

float Finite(float logprob) { return std::max(logprob, kLowestLogprob); }

// The UTF-8 bytes of `text`, as OpenAI's `bytes` lists them.
json BytesOf(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

int64_t CodePoints(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
}

absl::Status Disagree(absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("the model's log-probability outputs disagree: ", what));
}

}  // namespace

absl::StatusOr<AnswerLogprobs> ReadLogprobs(
    const inference::ModelInferResponse& response, int top) {
  absl::StatusOr<std::vector<float>> logprobs =
      Fp32Output(response, "output_logprobs");
  if (!logprobs.ok()) return logprobs.status();
  absl::StatusOr<std::vector<std::string>> texts =
      BytesOutputs(response, "output_tokens");
  if (!texts.ok()) return texts.status();
  const size_t n = logprobs->size();
  if (texts->size() != n) return Disagree("output_tokens");
  std::vector<float> top_logprobs;
  std::vector<std::string> top_texts;
  if (top > 0) {
    absl::StatusOr<std::vector<float>> values =
        Fp32Output(response, "output_top_logprobs");
    if (!values.ok()) return values.status();
    absl::StatusOr<std::vector<std::string>> names =
        BytesOutputs(response, "output_top_tokens");
    if (!names.ok()) return names.status();
    if (values->size() != n * top || names->size() != n * top) {
      return Disagree("output_top_logprobs");
    }
    top_logprobs = *std::move(values);
    top_texts = *std::move(names);
  }
  AnswerLogprobs answer;
  for (size_t i = 0; i < n; ++i) {
    AnswerLogprobs::Token token{std::move((*texts)[i]), (*logprobs)[i], {}};
    for (size_t k = i * top; k < (i + 1) * top; ++k) {
      token.top.emplace_back(std::move(top_texts[k]), top_logprobs[k]);
    }
    answer.tokens.push_back(std::move(token));
  }
  return answer;
}

json ChatLogprobsJson(const AnswerLogprobs& logprobs) {
  json content = json::array();
  for (const AnswerLogprobs::Token& token : logprobs.tokens) {
    json top = json::array();
    for (const auto& [text, logprob] : token.top) {
      top.push_back({{"token", text},
                     {"logprob", Finite(logprob)},
                     {"bytes", BytesOf(text)}});
    }
    content.push_back({{"token", token.text},
                       {"logprob", Finite(token.logprob)},
                       {"bytes", BytesOf(token.text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json CompletionLogprobsJson(const AnswerLogprobs& logprobs,
                            int64_t* text_offset) {
  json tokens = json::array();
  json token_logprobs = json::array();
  json top_logprobs = json::array();
  json offsets = json::array();
  for (const AnswerLogprobs::Token& token : logprobs.tokens) {
    tokens.push_back(token.text);
    token_logprobs.push_back(Finite(token.logprob));
    json top = json::object();
    // Two ids that decode alike keep the more probable one (listed first).
    for (const auto& [text, logprob] : token.top) {
      if (!top.contains(text)) top[text] = Finite(logprob);
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += CodePoints(token.text);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace castserve::openai
