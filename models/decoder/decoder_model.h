// DecoderForCausalLM: any decoder-only language model described by a
// DecoderSpec (decoder_spec.h), and the registration an architecture file
// makes of itself.
//
// Signature: input_ids INT64 [batch, seq] and attention_mask INT64
// [batch, seq] (optional, 1 = token, 0 = padding; absent = all tokens) ->
// logits FLOAT [batch, seq, vocab_size], f32 whatever the compute dtype.
// Model::Run is one forward pass. Positions are 0..seq-1 in every row, as
// transformers uses when no position_ids are given: pad on the right for
// results independent of the padding. The model is also an
// IncrementalDecoder (models/generation/incremental_decoder.h): decode steps
// over a per-sequence KV cache, for models/generation/generation.h and the
// scheduler.
//
// A checkpoint of the backbone alone (transformers' <Prefix>Model, as
// Qwen3-Embedding ships: keys without "model.", no lm_head) builds the same
// tree without lm_head and serves last_hidden_state FLOAT [batch, seq,
// hidden] (after the final norm) instead of logits; it does not generate
// (incremental_decoder() is null). With a sentence-transformers
// modules.json it serves sentence_embedding (last-token pooling).
//
// The module tree carries the checkpoint's dotted names
// ("model.layers.3.self_attn.q_proj") and kinds named after the class
// prefix ("LlamaAttention", "Qwen3DecoderLayer", "Phi3MLP", ...). With tied
// embeddings, "lm_head" owns no weight: its forward runs inside the
// embedding module's hooks and multiplies by the embedding table.
#ifndef CASTSERVE_MODELS_DECODER_DECODER_MODEL_H_
#define CASTSERVE_MODELS_DECODER_DECODER_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/decoder/decoder_spec.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"

namespace castserve::models {

// Builds the model from `spec` (validated here: InvalidArgument naming the
// inconsistency) and `weights`; reads checkpoint headers only (unless the
// policy is eager). Errors name the missing key or the weight whose shape
// disagrees with the spec. The model is immutable and its Forward
// thread-safe.
absl::StatusOr<std::unique_ptr<Model>> CreateDecoderForCausalLM(
    const DecoderSpec& spec, const WeightFactory& weights);

// Reads an architecture's spec from its config.json.
using DecoderSpecReader = absl::StatusOr<DecoderSpec> (*)(const HfConfig&);

// An architecture file's registration, at namespace scope of its .cc (whose
// cc_library sets alwayslink = 1):
//   const DecoderRegistration kRegistration("qwen3", &ReadQwen3Spec);
// registers `model_type` with the architecture registry
// (models/loading/model_loader.h) as a generating architecture. Aborts on a
// duplicate name.
class DecoderRegistration {
 public:
  DecoderRegistration(std::string model_type, DecoderSpecReader read);
};

// The spec the decoder registered for config.model_type() reads from
// `config`: InvalidArgument naming the model type when no decoder is
// registered for it, the reader's error otherwise. Thread-safe.
absl::StatusOr<DecoderSpec> ReadDecoderSpec(const HfConfig& config);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_DECODER_MODEL_H_
