// The generation signature a config.pbtxt states or is given: text_input
// BYTES [1] (with a tokenizer), messages BYTES [1] (with a tokenizer and a
// chat template) and input_ids INT64 [-1] in; text_output BYTES
// [1] (with a tokenizer) and output_ids INT64 [-1] out
// (generation_served_model.h), and the log-probability outputs, produced
// only for a request whose parameter `logprobs` is true (the top ones only
// with top_logprobs > 0): output_logprobs FP32 [-1] (each new token's),
// output_top_ids INT64 [-1, -1] and output_top_logprobs FP32 [-1, -1] (each
// new token's top_logprobs most probable ids and theirs), and with a
// tokenizer output_tokens BYTES [-1] and output_top_tokens BYTES [-1, -1]
// (each of those ids decoded alone).
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SIGNATURE_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SIGNATURE_H_

#include <vector>

#include "absl/status/status.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/served_model.h"

namespace castserve {

// The generation signature's tensors.
inline constexpr char kTextInputTensor[] = "text_input";
inline constexpr char kInputIdsTensor[] = "input_ids";
// BYTES [1]: the JSON array of chat messages, rendered by the model's chat
// template (chat_prompt.h); only models whose folder has one list it.
inline constexpr char kMessagesTensor[] = "messages";
inline constexpr char kTextOutputTensor[] = "text_output";
inline constexpr char kOutputIdsTensor[] = "output_ids";
inline constexpr char kOutputLogprobsTensor[] = "output_logprobs";
inline constexpr char kOutputTopIdsTensor[] = "output_top_ids";
inline constexpr char kOutputTopLogprobsTensor[] = "output_top_logprobs";
inline constexpr char kOutputTokensTensor[] = "output_tokens";
inline constexpr char kOutputTopTokensTensor[] = "output_top_tokens";

struct GenerationSignature {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// The signature of a generation model with (`text`) or without a tokenizer,
// and with (`chat`, only with a tokenizer) or without a chat template.
GenerationSignature GenerationSignatureOf(bool text, bool chat);

// Fills `signature` into `config` where it lists no inputs (outputs);
// otherwise every listed tensor must be one of the signature's, with its
// type and dims: InvalidArgument naming the one that is not.
absl::Status ApplyGenerationSignature(const GenerationSignature& signature,
                                      inference::ModelConfig& config);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SIGNATURE_H_
