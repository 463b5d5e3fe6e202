// SigLIP's vision tower (SiglipVisionModel, or the "vision_model" of a full
// SiglipModel checkpoint), and the pre-norm ViT encoder it shares with
// CLIP's vision tower (clip_vision.h) and the image-text models' text towers
// (image_text_model.h).
//
// Signature: pixel_values FLOAT [batch, num_channels, image_size,
// image_size] -> last_hidden_state FLOAT [batch, num_patches, hidden_size]
// and, unless the config says vision_use_head = false, pooler_output FLOAT
// [batch, hidden_size] from the attention-pooling head. Outputs are f32
// whatever the compute dtype. Images must have the config's image_size
// (no position-embedding interpolation).
//
// Module names are the checkpoint's ("vision_model.encoder.layers.0.mlp.fc1",
// "vision_model.head.attention.out_proj"); kinds are transformers' class
// names ("SiglipEncoderLayer", "SiglipMultiheadAttentionPoolingHead",
// "MultiheadAttention", ...), so the layerwise-casting policy decides as
// diffusers does: the head's in_proj_weight (kind MultiheadAttention) and
// its probe stay in the compute dtype, its out_proj (a Linear) is cast.
#ifndef CASTSERVE_MODELS_ENCODERS_SIGLIP_VISION_H_
#define CASTSERVE_MODELS_ENCODERS_SIGLIP_VISION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "casting/formats/checkpoint.h"
#include "models/layers/layers.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"
#include "models/module.h"

namespace castserve::models {

// The hyperparameters of a ViT-style vision tower, read from config.json
// (or from its "vision_config" object for a full SigLIP / CLIP checkpoint).
struct VisionTowerConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;
  int64_t patch_size = 16;
  double layer_norm_eps = 1e-6;
  Activation hidden_act = Activation::kGeluTanh;
  bool use_head = true;  // SigLIP's vision_use_head.

  int64_t num_patches() const {
    return (image_size / patch_size) * (image_size / patch_size);
  }

  // Fields absent from `config` keep the values of `defaults` (the
  // transformers class defaults, which save_pretrained leaves out).
  // InvalidArgument naming the key for a size out of range
  // (HfConfig::GetSize), a hidden size not divisible by the heads, an image
  // smaller than a patch or an unknown activation.
  static absl::StatusOr<VisionTowerConfig> FromHf(
      const HfConfig& config, const VisionTowerConfig& defaults,
      const std::string& default_activation);
};

// The vision config of `config`: its "vision_config" object when present
// (a full SigLIP / CLIP checkpoint), else `config` itself.
absl::StatusOr<HfConfig> VisionConfigOf(const HfConfig& config);

// The weights of a vision tower whose modules are named "vision_model.*":
// keys as named (transformers 4, and full SigLIP / CLIP checkpoints), or
// without the "vision_model." prefix (a vision model saved by transformers
// 5). NotFound when the checkpoint has neither patch embedding.
absl::StatusOr<WeightFactory> VisionTowerWeights(
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

class VisionEncoderLayer;

// The pre-norm transformer encoder of SigLIP and CLIP: layers
// `<name>.layers.N` of x + attn(layer_norm1(x)), then h + mlp(layer_norm2(h)),
// with unmasked multi-head self-attention (q/k/v/out_proj with biases) and
// an fc1 -> activation -> fc2 MLP. `kind_prefix` ("Siglip", "CLIP") names
// the kinds ("SiglipEncoderLayer", "CLIPAttention", ...).
class VisionEncoder : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<VisionEncoder>> Create(
      const std::string& name, const std::string& kind_prefix,
      const VisionTowerConfig& config, const WeightFactory& weights);

  // x [batch, tokens, hidden] in the compute dtype -> same shape.
  // `attention_bias`, when defined, is added to every layer's attention
  // scores (broadcastable to [batch, heads, tokens, tokens]: a text tower's
  // causal or padding mask); the vision towers attend unmasked.
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const at::Tensor& attention_bias = at::Tensor()) const;

 private:
  using Module::Module;
  std::vector<const VisionEncoderLayer*> layers_;
};

// fc1 -> activation -> fc2, as a module named `name` of kind
// `<kind_prefix>MLP`; used by the encoder and SigLIP's pooling head.
class VisionMlp : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<VisionMlp>> Create(
      const std::string& name, const std::string& kind_prefix,
      const VisionTowerConfig& config, const WeightFactory& weights);
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const;

 private:
  VisionMlp(const std::string& name, const std::string& kind,
            Activation activation);
  const Activation activation_;
  const Linear* fc1_ = nullptr;
  const Linear* fc2_ = nullptr;
};

// The patch embedding's convolution: num_channels to hidden_size, kernel
// and stride patch_size, no padding.
Conv2d::Options PatchConv2d(const VisionTowerConfig& config, bool bias);

// LayerNorm `name` over hidden_size with the config's eps.
absl::StatusOr<std::unique_ptr<LayerNorm>> MakeVisionLayerNorm(
    const std::string& name, const VisionTowerConfig& config,
    const WeightFactory& weights);

// The "vision_model" module of a tower: its embeddings, encoder, norms and
// pooling, as one module a Model holds (the vision towers'
// VisionTowerModel, the full image-text models of image_text_model.h).
// Immutable after creation; Forward is thread-safe.
class VisionTransformer : public Module {
 public:
  struct Output {
    // [batch, tokens, hidden]: what the tower model serves as
    // last_hidden_state.
    at::Tensor last_hidden_state;
    // [batch, hidden]: the tower's pooler_output; undefined for a tower
    // without one (SigLIP with vision_use_head false).
    at::Tensor pooled;
  };

  // pixels [batch, channels, image, image] in the compute dtype.
  virtual Output Forward(ForwardContext& ctx,
                         const at::Tensor& pixels) const = 0;

 protected:
  using Module::Module;
};

// SigLIP's vision transformer (modules "vision_model.*"): patch embeddings,
// the encoder, post_layernorm; pooled is the attention-pooling head's output
// when config.use_head.
absl::StatusOr<std::unique_ptr<VisionTransformer>>
CreateSiglipVisionTransformer(const VisionTowerConfig& config,
                              const WeightFactory& weights);

// Builds the SigLIP vision tower from `config` and `weights` (keys
// "vision_model.*"). Reads checkpoint headers only unless eager.
absl::StatusOr<std::unique_ptr<Model>> CreateSiglipVisionTower(
    const VisionTowerConfig& config, const WeightFactory& weights);

// The ArchitectureFactory registered for "siglip_vision_model"; also loads
// a full "siglip" checkpoint's vision tower when asked for this
// architecture explicitly.
absl::StatusOr<std::unique_ptr<Model>> CreateSiglipVisionModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options);

// A vision tower as a Model (SiglipVisionModel, CLIPVisionModel):
// `pixel_values` [batch, channels, image, image] in, converted to the compute
// dtype; the tower's last_hidden_state and, when it pools, pooler_output out
// in f32. The root module (kind `root_kind`) holds the tower. Immutable;
// Forward is thread-safe.
class VisionTowerModel : public Model {
 public:
  // `outputs`: the signature's outputs, as `tower` makes them.
  VisionTowerModel(std::string architecture, std::string root_kind,
                   const VisionTowerConfig& config,
                   std::vector<TensorSpec> outputs,
                   std::unique_ptr<VisionTransformer> tower,
                   const WeightFactory& weights);

  std::string architecture() const override { return architecture_; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }
  casting::Device device() const override { return device_; }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& ctx,
                           const NamedTensors& inputs) const override;

 private:
  const at::ScalarType compute_dtype_;
  const casting::Device device_;
  Module root_;
  const std::string architecture_;
  const std::vector<TensorSpec> inputs_;
  const std::vector<TensorSpec> outputs_;
  const VisionTransformer* tower_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_SIGLIP_VISION_H_
