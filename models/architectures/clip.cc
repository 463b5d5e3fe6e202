// CLIP (CLIPModel, model_type "clip"): CLIP's vision transformer
// (clip_vision.h) and a causal text transformer on the same encoder, each
// pooled and projected without bias to projection_dim: image_embeds =
// visual_projection(post_layernorm(class token)), text_embeds =
// text_projection(the end-of-text token's final state), as
// get_image_features / get_text_features compute them. The end-of-text token
// is the first eos_token_id of the row, or the row's highest id where the
// config says eos_token_id 2 (the rule transformers keeps for configs from
// before its fix; openai/clip-vit-* ship such configs). logit_scale is not
// served (image_text_model.h).
#include "models/encoders/clip_vision.h"
#include "models/encoders/image_text_model.h"

namespace castserve::models {
namespace {

// transformers' CLIPTextConfig defaults.
TextTowerConfig ClipTextDefaults() {
  TextTowerConfig text;
  text.encoder.hidden_size = 512;
  text.encoder.intermediate_size = 2048;
  text.encoder.num_hidden_layers = 12;
  text.encoder.num_attention_heads = 8;
  text.encoder.layer_norm_eps = 1e-5;
  text.vocab_size = 49408;
  text.max_position_embeddings = 77;
  text.eos_token_id = 49407;
  text.pad_token_id = 1;
  text.causal = true;
  return text;
}

absl::StatusOr<ImageTextSpec> ReadClipSpec(const HfConfig& config) {
  ImageTextSpec spec;
  spec.model_type = "clip";
  spec.class_prefix = "CLIP";
  absl::StatusOr<HfConfig> vision = config.GetObject("vision_config");
  if (!vision.ok()) return vision.status();
  absl::StatusOr<VisionTowerConfig> tower =
      VisionTowerConfig::FromHf(*vision, ClipVisionDefaults(), "quick_gelu");
  if (!tower.ok()) return tower.status();
  spec.vision = *tower;
  spec.vision.use_head = false;
  spec.make_vision = &CreateClipVisionTransformer;
  absl::StatusOr<HfConfig> text = config.GetObject("text_config");
  if (!text.ok()) return text.status();
  absl::StatusOr<TextTowerConfig> text_tower =
      ReadTextTowerConfig(*text, ClipTextDefaults(), "quick_gelu");
  if (!text_tower.ok()) return text_tower.status();
  spec.text = *text_tower;
  spec.text.pooling = spec.text.eos_token_id == 2 ? TextPooling::kHighestId
                                                  : TextPooling::kFirstEos;
  absl::StatusOr<int64_t> projection = config.GetSize("projection_dim", 512);
  if (!projection.ok()) return projection.status();
  spec.projection_dim = *projection;
  spec.image_projection = "visual_projection";
  spec.text_projection = "text_projection";
  spec.unserved_keys = {"logit_scale"};
  return spec;
}

const ImageTextRegistration kRegistration("clip", &ReadClipSpec);

}  // namespace
}  // namespace castserve::models
