// GenerationParameters: a generation request's `parameters` map (Triton's
// generate extension and OpenAI-style names) decoded at the edge into typed
// values. The README's "Generation" section lists them. This decodes the
// wire form (types, JSON lists, the bounds on stop strings and ids); the
// ranges of the values that reach the engine are checked once, with the
// prompt, by models::CheckGenerationRequest when DecodeGenerationRequest
// (generation_request.h) builds the checked request.
//
//   max_tokens          int     1..kMaxGenerationTokens (else the config's
//                               default_max_tokens)            [the check's]
//   temperature         number  >= 0 (0: greedy)               [the check's]
//   top_k               int     >= 0 (0: off)                  [the check's]
//   top_p               number  (0, 1]                         [the check's]
//   repetition_penalty  number  > 0                            [the check's]
//   presence_penalty    number  [-2, 2] (0: off)               [the check's]
//   frequency_penalty   number  [-2, 2] (0: off)               [the check's]
//   logprobs            bool    the log-probability outputs
//   top_logprobs        int     0..20, with logprobs           [the check's]
//   seed                int     >= 0
//   stop                string  one stop string, or a JSON array of them
//   stop_token_ids      string  a JSON array of ids, or an int: one id
//                               (inside the vocabulary: the check's)
//   ignore_eos          bool
//   triton_enable_empty_final_response  bool  (Triton's)
//
// A number takes int64_param or double_param; an int takes int64_param or
// uint64_param (within int64). Every error is InvalidArgument naming the
// parameter: "parameter 'top_k' must be an integer, got a string". Other
// keys (Triton's reserved ones such as "timeout", unknown ones) are left to
// whoever reads them or ignored.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_PARAMETERS_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_PARAMETERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/map.h"
#include "models/generation/sampling.h"
#include "proto/inference.pb.h"
#include "server/core/generation_parameter_names.h"

namespace castserve {

// Bounds on what one request may ask for.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr size_t kMaxStopTokenIds = 64;

struct GenerationParameters {
  // Absent: the model's default_max_tokens.
  std::optional<int64_t> max_tokens;
  models::SamplingParams sampling;
  // Non-empty, valid UTF-8 strings; generation ends where one appears in the
  // text, which is then cut before it.
  std::vector<std::string> stop;
  // Not checked here: models::CheckGenerationRequest checks them against
  // the vocabulary.
  std::vector<int64_t> stop_token_ids;
  // True: the model's EOS ids do not end generation.
  bool ignore_eos = false;
  // True: every token's response says final=false and one more response
  // without outputs says final=true.
  bool empty_final_response = false;
};

using InferParameters =
    google::protobuf::Map<std::string, inference::InferParameter>;

// The generation parameters of `parameters`; InvalidArgument as above.
absl::StatusOr<GenerationParameters> ParseGenerationParameters(
    const InferParameters& parameters);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_PARAMETERS_H_
