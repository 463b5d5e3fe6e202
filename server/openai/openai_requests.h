// The OpenAI API's request bodies decoded once, at the edge, into checked
// values: every field castserve honours is checked for its type and range,
// the API's fields it cannot honour are refused by name unless they hold the
// value that means "off" (400, the field as the error's `param`,
// openai_errors.h), and any other field is ignored, as OpenAI's servers
// ignore fields they do not know. docs/PROTOCOL.md lists the
// fields. Every size is bounded before it is kept. Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_REQUESTS_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_REQUESTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::openai {

// Bounds on one request.
inline constexpr size_t kMaxBodyBytes = size_t{32} << 20;
inline constexpr int kMaxJsonDepth = 16;
inline constexpr size_t kMaxModelNameBytes = 256;
// Strings and token arrays of embeddings, prompts, documents.
inline constexpr size_t kMaxInputs = 2048;
inline constexpr size_t kMaxInputBytes = size_t{1} << 20;
inline constexpr size_t kMaxInputTokens = 32768;
// Completions: prompts x n sequences at most.
inline constexpr int kMaxChoices = 8;
inline constexpr size_t kMaxPrompts = 8;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr int64_t kMaxTokensLimit = 1 << 20;
inline constexpr int64_t kMaxDimensions = 1 << 16;
// The sampler's bounds (models/generation/sampling.h), OpenAI's too.
inline constexpr double kMaxPenalty = 2;
inline constexpr int kMaxTopLogprobs = 20;

// One text or token array.
struct TextOrTokens {
  bool is_tokens = false;
  std::string text;
  std::vector<int64_t> tokens;
};

struct EmbeddingsRequest {
  std::string model;
  std::vector<TextOrTokens> inputs;  // 1..kMaxInputs.
  bool base64 = false;
  // Matryoshka truncation: 1..kMaxDimensions.
  std::optional<int64_t> dimensions;
};

struct CompletionRequest {
  std::string model;
  bool chat = false;
  // Completions: 1..kMaxPrompts prompts.
  std::vector<TextOrTokens> prompts;
  // Chat: the messages as a JSON array (what the model's `messages` input
  // takes), roles and contents checked.
  std::string messages_json;
  std::optional<int64_t> max_tokens;  // 1..kMaxTokensLimit.
  // OpenAI's defaults: sampling at temperature 1, top_p 1.
  double temperature = 1;
  double top_p = 1;
  std::optional<int64_t> seed;    // >= 0.
  std::vector<std::string> stop;  // At most kMaxStopStrings, non-empty.
  int n = 1;                      // 1..kMaxChoices (prompts x n too).
  // [-kMaxPenalty, kMaxPenalty]; 0: off.
  double presence_penalty = 0;
  double frequency_penalty = 0;
  // Completions' `logprobs: N` (0..kMaxTopLogprobs), chat's `logprobs: true`
  // with `top_logprobs: N`: each token's log-probability and the N most
  // probable tokens'.
  bool logprobs = false;
  int top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;
};

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;  // 1..kMaxInputs.
  std::optional<int64_t> top_n;        // >= 1.
  bool return_documents = false;
};

// INVALID_ARGUMENT about the request field `param` (a JSON path such as
// "messages[2].content"); `message` names it too. The error's `param`.
absl::Status InvalidField(absl::string_view param, absl::string_view message);

// The field a status from InvalidField names; nullopt for others.
std::optional<std::string> FieldOf(const absl::Status& status);

// InvalidArgument naming the field (InvalidField) for a body that is not
// such a request.
absl::StatusOr<EmbeddingsRequest> DecodeEmbeddingsRequest(
    absl::string_view body);
absl::StatusOr<CompletionRequest> DecodeCompletionRequest(
    absl::string_view body, bool chat);
absl::StatusOr<RerankRequest> DecodeRerankRequest(absl::string_view body);

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_REQUESTS_H_
