// GenerationServedModel: a decoder model (llama, mistral, qwen2) whose
// config has a `generation` block, served as a generation model
// (model_transaction_policy decoupled). A request gives exactly one of
//   text_input  BYTES [1]   (only when the folder has a tokenizer; encoded
//                            with its special tokens)
//   input_ids   INT64 [-1]
//   messages    BYTES [1]   (only with a tokenizer and a chat template: the
//                            JSON array of chat messages, chat_prompt.h)
// and the parameters of generation_parameters.h; it becomes a
// models::SequenceRequest for the model's GenerationEngine. Outputs:
// output_ids INT64 [-1] (the new ids, an EOS or stop id included) and, with a
// tokenizer, text_output BYTES [1] (their text, cut before a stop string).
//
// Streaming (InferenceCall::partial_response set): one response per token
// (output_ids [1], text_output: the new piece, see generation_text.h), each
// with parameter triton_final_response false except the last, which also
// carries finish_reason ("length" for max_tokens, "stop" otherwise) and is
// written into call.response. The final response also carries the
// parameter prompt_tokens (int64: the prompt's length in tokens). With
// triton_enable_empty_final_response every token's response goes through
// partial_response and the final one has no outputs. A token's response goes
// out as soon as the token is chosen, but for the one that ends the sequence
// (max_tokens reached, an EOS or stop id, a stop string), which becomes the
// final response when the engine is done. Unary: one response with all new ids
// and the whole text.
//
// Validation happens once, in Infer, before anything is submitted
// (DecodeGenerationRequest, generation_request.h): inputs, parameters, stop
// ids within the vocabulary, a prompt within the context, max_tokens within
// the positions left; INVALID_ARGUMENT naming what is wrong. The engine runs
// the checked request. The call's deadline and cancellation reach the sequence.
//
// Statistics: every request counts once (success or its failure); tokens,
// time to first token and inter-token times go to the recorder
// (generation_statistics.h), the engine's KV bytes to activity().kv_cache
// and tracked_bytes(). The wire responses are generation_responses.h's, the
// signature generation_signature.h's.
//
// Shutdown: once the model's cancellation is set, sequences end before their
// next step with UNAVAILABLE. Unloading waits for the running ones
// (pending_requests) as for every model.
//
// Thread-safe. Destroying it stops the engine (every sequence ends with
// UNAVAILABLE); it may be destroyed from a `done` callback, which runs on the
// engine's step thread (the engine is then stopped on another thread).
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SERVED_MODEL_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SERVED_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "casting/memory/footprint.h"
#include "models/cancellation.h"
#include "models/model.h"
#include "platform/clock.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/generation/chat_prompt.h"
#include "server/servables/generation/generation_engine.h"
#include "server/servables/generation/generation_signature.h"
#include "server/servables/served_model_handle.h"
#include "server/servables/tracked_model_id.h"
#include "text/tokenizer.h"

namespace castserve {

struct GenerationModelParts {
  // Tags the model's memory; may be null. Declared first: released last.
  std::unique_ptr<TrackedModelId> tracked_id;
  // The model's config.pbtxt; `generation` must be present (validated,
  // ValidateModelConfig).
  inference::ModelConfig config;
  // The decoder (may be null in tests): outlives the engine, which runs it.
  std::shared_ptr<models::Model> model;
  int64_t vocab_size = 0;
  // A prompt plus its new tokens fit in this many positions.
  int64_t max_positions = 0;
  // The checkpoint's EOS ids (generation_config.json).
  std::vector<int64_t> eos_token_ids;
  // Null: token ids only.
  std::shared_ptr<const text::Tokenizer> tokenizer;
  // The folder's chat template; null when it has none. Used only with a
  // tokenizer: then the signature lists the `messages` input.
  std::shared_ptr<const ChatPrompt> chat;
  // Over `model`.
  std::unique_ptr<GenerationEngine> engine;
  // The model's (the manager's shutdown; may be null): once set, running
  // and new sequences end with UNAVAILABLE and its reason.
  std::shared_ptr<const models::Cancellation> cancellation;
  // What the statistics' times read; null: platform::Clock::Real().
  platform::Clock* clock = nullptr;
};

class GenerationServedModel final : public ServedModelHandle {
 public:
  // The effective config (signature, max_batch_size 0, decoupled, the
  // generation defaults filled in); InvalidArgument when the config lists
  // inputs or outputs that are not the generation signature's.
  static absl::StatusOr<std::unique_ptr<GenerationServedModel>> Create(
      GenerationModelParts parts);
  ~GenerationServedModel() override;

  // ServedModel, forwarded to the body by ServedModelHandle. What the
  // memory budget counts (tracked_bytes()): the tracked model's bytes
  // (weights, step transients and the KV pool's allocated blocks: the
  // engine's step thread runs under the model's tag) plus the part of the
  // pool not allocated yet, so that the whole configured pool counts from
  // load on, except in the cool tier: a move there frees the pool's blocks
  // no sequence holds, and each block its running sequences give back
  // later (GenerationEngine::KeepUnheldBlocks), and only the blocks
  // allocated count until the model is promoted.

 private:
  class Impl;
  explicit GenerationServedModel(std::shared_ptr<Impl> impl);
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_SERVED_MODEL_H_
