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

// embeddings -> pre_layrnorm -> encoder; pooled is post_layernorm of the
// class token.
class ClipVisionTransformer : public VisionTransformer {
 public:
  static absl::StatusOr<std::unique_ptr<ClipVisionTransformer>> Create(
      const VisionTowerConfig& config, const WeightFactory& weights) {
    const std::string name = "vision_model";
    auto tower = std::unique_ptr<ClipVisionTransformer>(
        new ClipVisionTransformer(name, "CLIPVisionTransformer"));
    auto embeddings =
        ClipEmbeddings::Create(name + ".embeddings", config, weights);
    if (!embeddings.ok()) return embeddings.status();
    tower->embeddings_ = tower->AddChild(*std::move(embeddings));
    // "layrnorm": transformers' spelling, kept in every CLIP checkpoint.
    auto pre_norm =
        MakeVisionLayerNorm(name + ".pre_layrnorm", config, weights);
    if (!pre_norm.ok()) return pre_norm.status();
    tower->pre_norm_ = tower->AddChild(*std::move(pre_norm));
    auto encoder =
        VisionEncoder::Create(name + ".encoder", "CLIP", config, weights);
    if (!encoder.ok()) return encoder.status();
    tower->encoder_ = tower->AddChild(*std::move(encoder));
    auto post_norm =
        MakeVisionLayerNorm(name + ".post_layernorm", config, weights);
    if (!post_norm.ok()) return post_norm.status();
    tower->post_norm_ = tower->AddChild(*std::move(post_norm));
    return tower;
  }

  Output Forward(ForwardContext& ctx, const at::Tensor& pixels) const override {
    ModuleCall call(*this, ctx);
    at::Tensor hidden =
        pre_norm_->Forward(ctx, embeddings_->Forward(ctx, pixels));
    hidden = encoder_->Forward(ctx, hidden);
    return {hidden, post_norm_->Forward(ctx, hidden.select(1, 0))};
  }

 private:
  using VisionTransformer::VisionTransformer;
  const ClipEmbeddings* embeddings_ = nullptr;
  const LayerNorm* pre_norm_ = nullptr;
  const VisionEncoder* encoder_ = nullptr;
  const LayerNorm* post_norm_ = nullptr;
};

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

absl::StatusOr<std::unique_ptr<VisionTransformer>> CreateClipVisionTransformer(
    const VisionTowerConfig& config, const WeightFactory& weights) {
  auto tower = ClipVisionTransformer::Create(config, weights);
  if (!tower.ok()) return tower.status();
  return std::unique_ptr<VisionTransformer>(*std::move(tower));
}

absl::StatusOr<std::unique_ptr<Model>> CreateClipVisionTower(
    const VisionTowerConfig& config, const WeightFactory& weights) {
  std::vector<TensorSpec> outputs = {
      {"last_hidden_state",
       at::kFloat,
       {-1, config.num_patches() + 1, config.hidden_size}},
      {"pooler_output", at::kFloat, {-1, config.hidden_size}}};
  auto tower = CreateClipVisionTransformer(config, weights);
  if (!tower.ok()) return tower.status();
  return std::unique_ptr<Model>(
      new VisionTowerModel("clip_vision_model", "CLIPVisionModel", config,
                           std::move(outputs), *std::move(tower), weights));
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
