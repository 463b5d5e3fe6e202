// SigLIP (SiglipModel, model_type "siglip"): SigLIP's vision transformer
// with its attention-pooling head (siglip_vision.h) and a bidirectional
// text transformer on the same encoder whose last position goes through
// the text tower's `head` (a Linear with bias to projection_size):
// image_embeds = the vision head's output, text_embeds = head(final state
// of the last token), as get_image_features / get_text_features compute
// them. SigLIP was trained on texts padded to max_position_embeddings
// without a mask (its processor's padding="max_length"); given an
// attention_mask the model pads each text so itself (TextPooling::
// kLastPadded), whatever the batch's padding. logit_scale and logit_bias
// are not served (image_text_model.h).
#include "models/encoders/image_text_model.h"
#include "models/encoders/siglip_vision.h"

namespace castserve::models {
namespace {

// transformers' SiglipTextConfig defaults.
TextTowerConfig SiglipTextDefaults() {
  TextTowerConfig text;
  text.encoder.layer_norm_eps = 1e-6;
  text.vocab_size = 32000;
  text.max_position_embeddings = 64;
  text.eos_token_id = 49407;
  text.pad_token_id = 1;
  text.causal = false;
  text.pooling = TextPooling::kLastPadded;
  text.head = "head";
  return text;
}

absl::StatusOr<ImageTextSpec> ReadSiglipSpec(const HfConfig& config) {
  ImageTextSpec spec;
  spec.model_type = "siglip";
  spec.class_prefix = "Siglip";
  absl::StatusOr<HfConfig> vision = config.GetObject("vision_config");
  if (!vision.ok()) return vision.status();
  absl::StatusOr<VisionTowerConfig> tower = VisionTowerConfig::FromHf(
      *vision, VisionTowerConfig{}, "gelu_pytorch_tanh");
  if (!tower.ok()) return tower.status();
  if (!tower->use_head) {
    return absl::InvalidArgumentError(
        "vision_config.vision_use_head is false: a SiglipModel's image "
        "embedding is its vision head's output");
  }
  spec.vision = *tower;
  spec.make_vision = &CreateSiglipVisionTransformer;
  absl::StatusOr<HfConfig> text = config.GetObject("text_config");
  if (!text.ok()) return text.status();
  absl::StatusOr<TextTowerConfig> text_tower =
      ReadTextTowerConfig(*text, SiglipTextDefaults(), "gelu_pytorch_tanh");
  if (!text_tower.ok()) return text_tower.status();
  spec.text = *text_tower;
  absl::StatusOr<int64_t> head_size =
      text->GetSize("projection_size", spec.text.encoder.hidden_size);
  if (!head_size.ok()) return head_size.status();
  spec.text.head_size = *head_size;
  spec.unserved_keys = {"logit_scale", "logit_bias"};
  return spec;
}

const ImageTextRegistration kRegistration("siglip", &ReadSiglipSpec);

}  // namespace
}  // namespace castserve::models
