// ImageTextModel: a contrastive image-text model (CLIPModel, SiglipModel)
// served as one model: the vision transformer of its vision tower
// (siglip_vision.h, clip_vision.h) and a text transformer on the same
// pre-norm encoder (VisionEncoder), each with the pooling and projection
// the architecture names. An architecture file
// (models/architectures/clip.cc, siglip.cc) states its ImageTextSpec and
// registers itself with ImageTextRegistration.
//
// Signature (every input optional: a request carries images, token ids or
// both, and gets the outputs of what it carried):
//   pixel_values    float32 [batch, channels, image, image]
//   input_ids       int64 [batch, seq], seq at most the text's
//                   max_position_embeddings
//   attention_mask  int64 [batch, seq] (with input_ids): 1 = token,
//                   0 = padding
//   -> image_embeds float32 [batch, dim]: transformers' get_image_features
//   -> text_embeds  float32 [batch, dim]: get_text_features
// With both inputs the images and texts share the batch dimension, as the
// inputs of one request do. Outputs are f32 whatever the compute dtype; the
// embeddings are not normalized. logit_scale and logit_bias are not served:
// a client computes the similarity (cosine of the embeddings, times
// exp(logit_scale), plus logit_bias for SigLIP) from the two outputs.
//
// Module names are the checkpoint's ("text_model.encoder.layers.0.mlp.fc1",
// "vision_model.head.probe", "visual_projection"); kinds are transformers'
// class names with the spec's prefix ("CLIPEncoderLayer",
// "SiglipTextEmbeddings"), so the layerwise-casting policy decides as for
// the towers. Every checkpoint tensor must be read by a module or be one of
// the spec's unserved keys: any other is refused at load, naming it.
#ifndef CASTSERVE_MODELS_ENCODERS_IMAGE_TEXT_MODEL_H_
#define CASTSERVE_MODELS_ENCODERS_IMAGE_TEXT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "models/encoders/siglip_vision.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/loading/weight_policy.h"
#include "models/model.h"

namespace castserve::models {

// Which position of the text tower's final states is the text's.
enum class TextPooling {
  // The first position holding eos_token_id (CLIP, transformers >= 4.31;
  // the pad token may be the eos token, so the first).
  kFirstEos,
  // The highest token id of the row (CLIP whose config says eos_token_id 2:
  // transformers keeps the rule of the checkpoints from before its fix,
  // where the end token had the highest id).
  kHighestId,
  // The last position of the row padded to max_position_embeddings with
  // pad_token_id (SigLIP, trained on texts padded so: its processor's
  // padding="max_length"). input_ids without attention_mask are taken as
  // the client padded them (their last position); with attention_mask each
  // row is laid out as its real tokens, then pad_token_id up to
  // max_position_embeddings, before the forward, so that a text's embedding
  // does not depend on how its batch was padded.
  kLastPadded,
};

// The text transformer's hyperparameters: the encoder's sizes in the
// VisionTowerConfig fields VisionEncoder reads (hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads,
// layer_norm_eps, hidden_act), and the text's own.
struct TextTowerConfig {
  VisionTowerConfig encoder;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t eos_token_id = 0;
  int64_t pad_token_id = 0;
  // Causal self-attention (CLIP) or bidirectional (SigLIP).
  bool causal = false;
  TextPooling pooling = TextPooling::kFirstEos;
  // A Linear with bias over the pooled state inside the text tower, named
  // "text_model.<head>" (SigLIP's "head", to head_size); "" for none.
  std::string head;
  int64_t head_size = 0;
};

// Builds a tower's vision transformer (CreateClipVisionTransformer,
// CreateSiglipVisionTransformer).
using VisionTransformerFactory =
    absl::StatusOr<std::unique_ptr<VisionTransformer>> (*)(
        const VisionTowerConfig&, const WeightFactory&);

struct ImageTextSpec {
  std::string model_type;    // "clip", "siglip".
  std::string class_prefix;  // "CLIP", "Siglip": kinds "CLIPTextModel", ...
  VisionTowerConfig vision;
  VisionTransformerFactory make_vision = nullptr;
  TextTowerConfig text;
  // Linears without bias from each tower's pooled state to projection_dim
  // (CLIP's "visual_projection" and "text_projection"); "" for none: the
  // pooled state is the embedding.
  std::string image_projection;
  std::string text_projection;
  int64_t projection_dim = 0;
  // Checkpoint keys (matched as prefixes) no module reads and the model
  // does not serve ("logit_scale", "logit_bias").
  std::vector<std::string> unserved_keys;
};

// The text transformer's config from `text_config` (sizes range-checked,
// HfConfig::GetSize; missing keys take `defaults`, the transformers class
// defaults save_pretrained leaves out). InvalidArgument naming the key.
absl::StatusOr<TextTowerConfig> ReadTextTowerConfig(
    const HfConfig& text_config, const TextTowerConfig& defaults,
    const std::string& default_activation);

// The model of `spec` over `checkpoint` (keys "vision_model.*",
// "text_model.*" and the projections; headers only unless the policy is
// eager). Errors name the missing key, the weight whose shape disagrees, or
// a tensor no module reads. Immutable; Forward is thread-safe.
absl::StatusOr<std::unique_ptr<Model>> CreateImageTextModel(
    const ImageTextSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

// Reads an architecture's spec from its config.json.
using ImageTextSpecReader = absl::StatusOr<ImageTextSpec> (*)(const HfConfig&);

// An architecture file's registration, at namespace scope of its .cc (whose
// cc_library sets alwayslink = 1):
//   const ImageTextRegistration kRegistration("clip", &ReadClipSpec);
// Aborts on a duplicate name.
class ImageTextRegistration {
 public:
  ImageTextRegistration(std::string model_type, ImageTextSpecReader read);
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_IMAGE_TEXT_MODEL_H_
