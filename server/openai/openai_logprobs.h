// The log-probabilities of a generation answer in OpenAI's shapes. The
// generation model's outputs (docs/PROTOCOL.md, the generation signature):
// output_logprobs FP32 [n], output_tokens BYTES [n] (each token decoded
// alone), output_top_logprobs FP32 [n, top] and output_top_tokens BYTES
// [n, top]. They come from the raw model distribution (log_softmax of the
// logits before penalties, temperature, top-k, top-p: vLLM's default).
// Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_LOGPROBS_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_LOGPROBS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace castserve::openai {

// The tokens of one answer (a streamed token's, or a whole sequence's).
struct AnswerLogprobs {
  struct Token {
    std::string text;
    float logprob = 0;
    // The `top` most probable, most probable first.
    std::vector<std::pair<std::string, float>> top;
  };
  std::vector<Token> tokens;
};

// The log-probability outputs of `response` with `top` alternatives per
// token; INTERNAL when they are absent or their sizes disagree.
absl::StatusOr<AnswerLogprobs> ReadLogprobs(
    const inference::ModelInferResponse& response, int top);

// Chat's `logprobs`: {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::json ChatLogprobsJson(const AnswerLogprobs& logprobs);

// Completions' `logprobs`: {"tokens", "token_logprobs", "top_logprobs" (one
// {token: logprob} object per token), "text_offset"}. `text_offset` is the
// offset in characters (code points) of the first token in the choice's
// text; it is advanced past these tokens (their texts, concatenated).
nlohmann::json CompletionLogprobsJson(const AnswerLogprobs& logprobs,
                                      int64_t* text_offset);

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_LOGPROBS_H_
