// EncoderModel: any BERT-like encoder described by an EncoderSpec
// (encoder_spec.h) — word, position and token type embeddings with a
// LayerNorm, a stack of post-norm layers (padding-masked self-attention,
// dense + residual + LayerNorm, the feed-forward) — with the head the spec
// names, and the registration an architecture file makes of itself.
//
// Signature:
//   input_ids       int64 [batch, seq]
//   attention_mask  int64 [batch, seq], optional (all ones): 1 = token,
//                   0 = padding
//   token_type_ids  int64 [batch, seq], optional (all zeros)
//   -> without a head: last_hidden_state float32 [batch, seq, hidden], and
//      pooler_output float32 [batch, hidden] when the checkpoint has pooler
//      weights;
//   -> a sequence classifier: scores float32 [batch, labels], the logits
//      (no activation), one per label of output_labels().
// Layers compute in the weight policy's compute dtype; outputs are f32.
//
// The module tree carries the checkpoint's dotted names without the key
// prefix ("encoder.layer.0.attention.self.query"; the classifier's under
// "classifier") and kinds named after the class prefix ("BertLayer",
// "XLMRobertaEmbeddings"). Every checkpoint tensor must be read by a module
// or sit under one of the spec's unserved prefixes: any other is refused at
// load, naming it (a head castserve would silently drop).
#ifndef CASTSERVE_MODELS_ENCODERS_ENCODER_MODEL_H_
#define CASTSERVE_MODELS_ENCODERS_ENCODER_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "models/encoders/encoder_spec.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_policy.h"
#include "models/model.h"

namespace castserve::models {

// The output of a sequence classifier.
inline constexpr char kScoresOutput[] = "scores";

// Builds the model from `spec` and `checkpoint` (headers only, unless the
// policy is eager). Errors name the missing key, the weight whose shape
// disagrees with the spec, or a tensor no module reads. The model is
// immutable and its Forward thread-safe.
absl::StatusOr<std::unique_ptr<Model>> CreateEncoderModel(
    const EncoderSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

// InvalidArgument naming (up to eight of) the tensors of `checkpoint` that
// no module of `root` reads (as a weight or a pre-quantized weight's
// scales) and that start with none of `unserved_prefixes`: a head or tower
// castserve would silently drop.
absl::Status RefuseUnreadTensors(
    Module& root, const casting::Checkpoint& checkpoint,
    const std::vector<std::string>& unserved_prefixes);

// Reads an architecture's spec from its config.json.
using EncoderSpecReader = absl::StatusOr<EncoderSpec> (*)(const HfConfig&);

// An architecture file's registration, at namespace scope of its .cc (whose
// cc_library sets alwayslink = 1):
//   const EncoderRegistration kRegistration("bert", &ReadBertSpec);
// registers `model_type` with the architecture registry
// (models/model_loader.h). Aborts on a duplicate name.
class EncoderRegistration {
 public:
  EncoderRegistration(std::string model_type, EncoderSpecReader read);
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_ENCODER_MODEL_H_
