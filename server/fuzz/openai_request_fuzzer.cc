// libFuzzer target: an OpenAI API request body through the decoder of the
// endpoint the first input byte chooses (embeddings, completions, chat
// completions, rerank). It may not crash, hang or allocate past what the
// body explains; what it accepts stays inside the documented bounds, and
// what it refuses is INVALID_ARGUMENT. Built by tools/run_fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/openai/openai_requests.h"

namespace {

namespace openai = castserve::openai;

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

template <typename Decoded>
bool Refused(const absl::StatusOr<Decoded>& decoded) {
  if (decoded.ok()) return false;
  Check(decoded.status().code() == absl::StatusCode::kInvalidArgument,
        "a refusal is INVALID_ARGUMENT");
  return true;
}

void CheckInputs(const std::vector<openai::TextOrTokens>& inputs,
                 size_t max_items) {
  Check(!inputs.empty(), "at least one input");
  Check(inputs.size() <= max_items, "inputs bounded");
  for (const openai::TextOrTokens& input : inputs) {
    Check(input.text.size() <= openai::kMaxInputBytes, "text bounded");
    Check(input.tokens.size() <= openai::kMaxInputTokens, "tokens bounded");
    for (int64_t id : input.tokens) Check(id >= 0, "ids >= 0");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto decoded = openai::DecodeEmbeddingsRequest(body);
      if (Refused(decoded)) return 0;
      CheckInputs(decoded->inputs, openai::kMaxInputs);
      Check(!decoded->model.empty(), "a model");
      break;
    }
    case 1:
    case 2: {
      const bool chat = data[0] % 4 == 2;
      auto decoded = openai::DecodeCompletionRequest(body, chat);
      if (Refused(decoded)) return 0;
      Check(decoded->n >= 1 && decoded->n <= openai::kMaxChoices, "n");
      Check(decoded->temperature >= 0 && decoded->temperature <= 2,
            "temperature");
      Check(decoded->top_p > 0 && decoded->top_p <= 1, "top_p");
      Check(decoded->stop.size() <= openai::kMaxStopStrings, "stop");
      Check(!decoded->include_usage || decoded->stream, "include_usage");
      if (chat) {
        Check(!decoded->messages_json.empty(), "messages");
      } else {
        CheckInputs(decoded->prompts, openai::kMaxPrompts);
        Check(decoded->prompts.size() * decoded->n <=
                  static_cast<size_t>(openai::kMaxChoices),
              "prompts x n");
      }
      break;
    }
    default: {
      auto decoded = openai::DecodeRerankRequest(body);
      if (Refused(decoded)) return 0;
      Check(!decoded->documents.empty() &&
                decoded->documents.size() <= openai::kMaxInputs,
            "documents bounded");
      break;
    }
  }
  return 0;
}
