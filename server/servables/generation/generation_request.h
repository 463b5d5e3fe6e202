// A generation request checked once, where it enters GenerationServedModel:
// the wire request's inputs, requested outputs and parameters decoded, the
// prompt tokenised, and the prompt, its ids, the stop ids and max_tokens
// checked against the model. What the engine then runs is this checked
// value; nothing below the served model re-decides what was decided here.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_REQUEST_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/generation/generation.h"
#include "proto/inference.pb.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/generation/generation_parameters.h"
#include "text/tokenizer.h"

namespace castserve {

// The generation signature's tensors.
inline constexpr char kTextInputTensor[] = "text_input";
inline constexpr char kInputIdsTensor[] = "input_ids";
inline constexpr char kTextOutputTensor[] = "text_output";
inline constexpr char kOutputIdsTensor[] = "output_ids";

// What a request is checked against: one generation model's signature and
// limits. Not owned pointers outlive the check.
struct GenerationLimits {
  const std::vector<TensorSpec>* inputs = nullptr;
  const std::vector<TensorSpec>* outputs = nullptr;
  // Null: token ids only.
  const text::Tokenizer* tokenizer = nullptr;
  int64_t vocab_size = 0;
  // A prompt plus its new tokens fit in this many positions.
  int64_t max_positions = 0;
  // New tokens when the request gives no max_tokens.
  int64_t default_max_tokens = 0;
  // The checkpoint's EOS ids.
  std::vector<int64_t> eos_token_ids;
};

struct CheckedGenerationRequest {
  // The outputs the request names; empty: all.
  std::vector<std::string> requested_outputs;
  GenerationParameters parameters;
  // 1..max_positions - 1 ids inside the vocabulary.
  std::vector<int64_t> prompt;
  // max_new_tokens within the positions the prompt leaves; EOS ids unless
  // ignore_eos; stop ids inside the vocabulary; valid sampling.
  models::GenerationOptions options;
};

// `request` checked completely against `limits`: exactly one of text_input
// and input_ids (text needs a tokenizer and valid UTF-8), outputs of the
// model named once each, the parameters (ParseGenerationParameters), a stop
// string only with a tokenizer, the prompt's length and ids, the stop ids
// and max_tokens. INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<CheckedGenerationRequest> DecodeGenerationRequest(
    const inference::ModelInferRequest& request,
    const GenerationLimits& limits);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_REQUEST_H_
