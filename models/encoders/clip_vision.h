// CLIP's vision tower (CLIPVisionModel, or the "vision_model" of a full
// CLIPModel checkpoint).
//
// Signature: pixel_values FLOAT [batch, num_channels, image_size,
// image_size] -> last_hidden_state FLOAT [batch, 1 + num_patches,
// hidden_size] (the encoder's output, the class token first) and
// pooler_output FLOAT [batch, hidden_size] (post_layernorm of the class
// token). Outputs are f32 whatever the compute dtype; images must have the
// config's image_size.
//
// Module names are the checkpoint's ("vision_model.pre_layrnorm", with
// transformers' spelling; "vision_model.encoder.layers.0.self_attn.q_proj");
// the class embedding is a weight of "vision_model.embeddings" (kind
// CLIPVisionEmbeddings, never cast).
#ifndef CASTSERVE_MODELS_ENCODERS_CLIP_VISION_H_
#define CASTSERVE_MODELS_ENCODERS_CLIP_VISION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "models/encoders/siglip_vision.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"

namespace castserve::models {

// transformers' CLIPVisionConfig defaults (ViT-B/32).
VisionTowerConfig ClipVisionDefaults();

// CLIP's vision transformer (modules "vision_model.*"): class and patch
// embeddings, pre_layrnorm, the encoder; last_hidden_state is the encoder's
// output, pooled the post_layernorm of the class token.
absl::StatusOr<std::unique_ptr<VisionTransformer>> CreateClipVisionTransformer(
    const VisionTowerConfig& config, const WeightFactory& weights);

// Builds the CLIP vision tower from `config` and `weights` (keys
// "vision_model.*"). Reads checkpoint headers only unless eager.
absl::StatusOr<std::unique_ptr<Model>> CreateClipVisionTower(
    const VisionTowerConfig& config, const WeightFactory& weights);

// The ArchitectureFactory registered for "clip_vision_model"; also loads a
// full "clip" checkpoint's vision tower when asked for it explicitly.
absl::StatusOr<std::unique_ptr<Model>> CreateClipVisionModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_CLIP_VISION_H_
