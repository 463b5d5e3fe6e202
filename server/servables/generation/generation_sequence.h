// GenerationSequence: one generation request between the engine's tokens and
// its final response: the call, what the checked request asked for, and what
// the tokens built so far. GenerationServedModel makes one per request;
// generation_responses.h builds its responses, generation_statistics.h times
// it. Used on the engine's step thread only once submitted.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SEQUENCE_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SEQUENCE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "models/generation/sampling.h"
#include "proto/inference.pb.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/generation/generation_parameters.h"
#include "server/servables/generation/generation_text.h"

namespace castserve {

struct GenerationSequence {
  InferenceCall call;
  std::function<void(absl::Status)> done;
  GenerationParameters parameters;
  std::vector<std::string> requested_outputs;  // Empty: all.
  bool text = false;
  std::optional<GenerationText> text_stream;
  std::vector<int64_t> tokens;
  // With parameters.sampling.logprobs: one per token of `tokens` (the
  // engine's on_logprobs), and with a tokenizer each token decoded alone and
  // its top ids decoded alone (top_logprobs per token, flattened).
  std::vector<models::TokenLogprobs> logprobs;
  std::vector<std::string> token_texts;
  std::vector<std::string> top_token_texts;
  std::string whole_text;  // Unary: every piece.
  // Streaming: the response of the token that ends the sequence, which
  // becomes the final one once the engine is done.
  std::optional<inference::ModelInferResponse> held;
  // What ends the sequence after a token besides a stop string: its count,
  // an EOS or stop id.
  int64_t max_new_tokens = 0;
  int64_t prompt_tokens = 0;
  std::vector<int64_t> end_ids;
  absl::Time arrival;
  absl::Time last_token;
  absl::Status text_error;

  bool logprobs_asked() const { return parameters.sampling.logprobs; }
  bool Wants(absl::string_view output) const {
    return requested_outputs.empty() ||
           std::find(requested_outputs.begin(), requested_outputs.end(),
                     output) != requested_outputs.end();
  }
  // Whether `token`, the latest, ends the sequence by its count or its id.
  bool EndsWith(int64_t token) const {
    return static_cast<int64_t>(tokens.size()) >= max_new_tokens ||
           std::find(end_ids.begin(), end_ids.end(), token) != end_ids.end();
  }
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SEQUENCE_H_
