#include "models/encoders/clip_vision.h"

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "models/layers/layers.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

// [class embedding; patch Conv2d without bias] plus a learned position
// embedding per token.
class ClipEmbeddings : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<ClipEmbeddings>> Create(
      const std::string& name, const VisionTowerConfig& config,
      const WeightFactory& weights) {
    auto embeddings = std::unique_ptr<ClipEmbeddings>(
        new ClipEmbeddings(name, "CLIPVisionEmbeddings"));
    embeddings->tokens_ = config.num_patches() + 1;
    absl::Status status = AddParameter(*embeddings, weights, "class_embedding",
                                       {config.hidden_size});
    if (!status.ok()) return status;
    auto patch = Conv2d::Create(name + ".patch_embedding", weights,
                                PatchConv2d(config, /*bias=*/false));
    if (!patch.ok()) return patch.status();
    embeddings->patch_ = embeddings->AddChild(*std::move(patch));
    auto position = Embedding::Create(name + ".position_embedding", weights,
                                      embeddings->tokens_, config.hidden_size);
    if (!position.ok()) return position.status();
    embeddings->position_ = embeddings->AddChild(*std::move(position));
    return embeddings;
  }

  // pixels [batch, channels, size, size] -> [batch, 1 + patches, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& pixels) const {
    ModuleCall call(*this, ctx);
    at::Tensor patches =
        patch_->Forward(ctx, pixels).flatten(2).transpose(1, 2);
    at::Tensor cls = Param(ctx, "class_embedding")
                         .to(patches.scalar_type())
                         .expand({patches.size(0), 1, patches.size(2)});
    at::Tensor ids =
        at::arange(tokens_,
                   at::TensorOptions(at::kLong).device(pixels.device()))
            .unsqueeze(0);
    return at::cat({cls, patches}, 1) +
           position_->Forward(ctx, ids).to(patches.scalar_type());
  }

 private:
  using Module::Module;
  const Conv2d* patch_ = nullptr;
  const Embedding* position_ = nullptr;
  int64_t tokens_ = 0;
};

class ClipVisionTower : public VisionTowerModel {
 public:
  ClipVisionTower(const VisionTowerConfig& config, at::ScalarType compute_dtype,
                  casting::Device device)
      : VisionTowerModel("clip_vision_model", "CLIPVisionModel", config,
                         compute_dtype, device) {
    outputs_ = {{"last_hidden_state",
                 at::kFloat,
                 {-1, config.num_patches() + 1, config.hidden_size}},
                {"pooler_output", at::kFloat, {-1, config.hidden_size}}};
  }

  absl::Status Build(const VisionTowerConfig& config,
                     const WeightFactory& weights);

 protected:
  NamedTensors ForwardImpl(ForwardContext& ctx,
                           const NamedTensors& inputs) const override {
    ModuleCall root_call(root_, ctx);
    ModuleCall tower_call(*tower_, ctx);
    at::Tensor pixels = inputs.at("pixel_values").to(compute_dtype_);
    at::Tensor hidden =
        pre_norm_->Forward(ctx, embeddings_->Forward(ctx, pixels));
    hidden = encoder_->Forward(ctx, hidden);
    at::Tensor pooled = post_norm_->Forward(ctx, hidden.select(1, 0));
    return {{"last_hidden_state", hidden.to(at::kFloat)},
            {"pooler_output", pooled.to(at::kFloat)}};
  }

 private:
  Module* tower_ = nullptr;
  const ClipEmbeddings* embeddings_ = nullptr;
  const LayerNorm* pre_norm_ = nullptr;
  const VisionEncoder* encoder_ = nullptr;
  const LayerNorm* post_norm_ = nullptr;
};

absl::Status ClipVisionTower::Build(const VisionTowerConfig& config,
                                    const WeightFactory& weights) {
  const std::string name = "vision_model";
  tower_ =
      root_.AddChild(std::make_unique<Module>(name, "CLIPVisionTransformer"));
  auto embeddings =
      ClipEmbeddings::Create(name + ".embeddings", config, weights);
  if (!embeddings.ok()) return embeddings.status();
  embeddings_ = tower_->AddChild(*std::move(embeddings));
  // "layrnorm": transformers' spelling, kept in every CLIP checkpoint.
  auto pre_norm = MakeVisionLayerNorm(name + ".pre_layrnorm", config, weights);
  if (!pre_norm.ok()) return pre_norm.status();
  pre_norm_ = tower_->AddChild(*std::move(pre_norm));
  auto encoder =
      VisionEncoder::Create(name + ".encoder", "CLIP", config, weights);
  if (!encoder.ok()) return encoder.status();
  encoder_ = tower_->AddChild(*std::move(encoder));
  auto post_norm =
      MakeVisionLayerNorm(name + ".post_layernorm", config, weights);
  if (!post_norm.ok()) return post_norm.status();
  post_norm_ = tower_->AddChild(*std::move(post_norm));
  return absl::OkStatus();
}

const ArchitectureRegistration kClipVision("clip_vision_model",
                                           &CreateClipVisionModel);

}  // namespace

VisionTowerConfig ClipVisionDefaults() {
  VisionTowerConfig defaults;
  defaults.patch_size = 32;
  defaults.layer_norm_eps = 1e-5;
  defaults.hidden_act = Activation::kQuickGelu;
  defaults.use_head = false;
  return defaults;
}

absl::StatusOr<std::unique_ptr<Model>> CreateClipVisionTower(
    const VisionTowerConfig& config, const WeightFactory& weights) {
  auto model = std::make_unique<ClipVisionTower>(
      config, weights.compute_scalar_type(), weights.options().device);
  absl::Status built = model->Build(config, weights);
  if (!built.ok()) return built;
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> CreateClipVisionModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  absl::StatusOr<HfConfig> vision = VisionConfigOf(config);
  if (!vision.ok()) return vision.status();
  absl::StatusOr<VisionTowerConfig> tower =
      VisionTowerConfig::FromHf(*vision, ClipVisionDefaults(), "quick_gelu");
  if (!tower.ok()) return tower.status();
  // CLIP has no attention-pooling head whatever the config says.
  tower->use_head = false;
  absl::StatusOr<WeightFactory> weights =
      VisionTowerWeights(std::move(checkpoint), options);
  if (!weights.ok()) return weights.status();
  return CreateClipVisionTower(*tower, *weights);
}

}  // namespace castserve::models
