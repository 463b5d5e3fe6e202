#include "models/encoders/siglip_vision.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"
#include "models/kernels/matmul.h"
#include "models/layers/attention.h"
#include "models/loading/model_loader.h"

namespace castserve::models {

absl::StatusOr<std::unique_ptr<LayerNorm>> MakeVisionLayerNorm(
    const std::string& name, const VisionTowerConfig& config,
    const WeightFactory& weights) {
  return LayerNorm::Create(name, weights, config.hidden_size,
                           config.layer_norm_eps);
}

namespace {

// Unmasked multi-head self-attention with biased q/k/v/out projections.
class SelfAttention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<SelfAttention>> Create(
      const std::string& name, const std::string& kind_prefix,
      const VisionTowerConfig& config, const WeightFactory& weights) {
    auto attention = std::unique_ptr<SelfAttention>(
        new SelfAttention(name, kind_prefix + "Attention", config));
    const int64_t hidden = config.hidden_size;
    for (auto [local, slot] :
         std::vector<std::pair<const char*, const Linear**>>{
             {"q_proj", &attention->q_},
             {"k_proj", &attention->k_},
             {"v_proj", &attention->v_},
             {"out_proj", &attention->out_}}) {
      auto linear = Linear::Create(absl::StrCat(name, ".", local), weights,
                                   hidden, hidden, /*bias=*/true);
      if (!linear.ok()) return linear.status();
      *slot = attention->AddChild(*std::move(linear));
    }
    return attention;
  }

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const at::Tensor& attention_bias) const {
    ModuleCall call(*this, ctx);
    // In registration order, which prefetch follows until it has seen a
    // forward (as function arguments they would run in unspecified order).
    at::Tensor q = SplitHeads(q_->Forward(ctx, x), heads_);
    at::Tensor k = SplitHeads(k_->Forward(ctx, x), heads_);
    at::Tensor v = SplitHeads(v_->Forward(ctx, x), heads_);
    at::Tensor attended =
        ScaledDotProductAttention(q, k, v, attention_bias, scale_);
    return out_->Forward(ctx, MergeHeads(attended));
  }

 private:
  SelfAttention(const std::string& name, const std::string& kind,
                const VisionTowerConfig& config)
      : Module(name, kind),
        heads_(config.num_attention_heads),
        scale_(std::pow(static_cast<double>(config.hidden_size /
                                            config.num_attention_heads),
                        -0.5)) {}

  const int64_t heads_;
  const double scale_;
  const Linear* q_ = nullptr;
  const Linear* k_ = nullptr;
  const Linear* v_ = nullptr;
  const Linear* out_ = nullptr;
};

}  // namespace

class VisionEncoderLayer : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<VisionEncoderLayer>> Create(
      const std::string& name, const std::string& kind_prefix,
      const VisionTowerConfig& config, const WeightFactory& weights) {
    auto layer = std::unique_ptr<VisionEncoderLayer>(
        new VisionEncoderLayer(name, kind_prefix + "EncoderLayer"));
    auto norm1 = MakeVisionLayerNorm(name + ".layer_norm1", config, weights);
    if (!norm1.ok()) return norm1.status();
    layer->norm1_ = layer->AddChild(*std::move(norm1));
    auto attention = SelfAttention::Create(name + ".self_attn", kind_prefix,
                                           config, weights);
    if (!attention.ok()) return attention.status();
    layer->attention_ = layer->AddChild(*std::move(attention));
    auto norm2 = MakeVisionLayerNorm(name + ".layer_norm2", config, weights);
    if (!norm2.ok()) return norm2.status();
    layer->norm2_ = layer->AddChild(*std::move(norm2));
    auto mlp = VisionMlp::Create(name + ".mlp", kind_prefix, config, weights);
    if (!mlp.ok()) return mlp.status();
    layer->mlp_ = layer->AddChild(*std::move(mlp));
    return layer;
  }

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const at::Tensor& attention_bias) const {
    ModuleCall call(*this, ctx);
    at::Tensor h =
        x + attention_->Forward(ctx, norm1_->Forward(ctx, x), attention_bias);
    return h + mlp_->Forward(ctx, norm2_->Forward(ctx, h));
  }

 private:
  using Module::Module;
  const LayerNorm* norm1_ = nullptr;
  const SelfAttention* attention_ = nullptr;
  const LayerNorm* norm2_ = nullptr;
  const VisionMlp* mlp_ = nullptr;
};

absl::StatusOr<HfConfig> VisionConfigOf(const HfConfig& config) {
  if (config.Has("vision_config")) return config.GetObject("vision_config");
  return config;
}

absl::StatusOr<WeightFactory> VisionTowerWeights(
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  constexpr char kTower[] = "vision_model.";
  absl::StatusOr<std::string> prefix = FindKeyPrefix(
      *checkpoint, "embeddings.patch_embedding.weight", {kTower, ""});
  if (!prefix.ok()) return prefix.status();
  if (*prefix == kTower) return WeightFactory(std::move(checkpoint), options);
  return WeightFactory(std::move(checkpoint), options, /*key_prefix=*/"",
                       /*module_prefix=*/kTower);
}

absl::StatusOr<VisionTowerConfig> VisionTowerConfig::FromHf(
    const HfConfig& config, const VisionTowerConfig& defaults,
    const std::string& default_activation) {
  VisionTowerConfig out = defaults;
  struct Field {
    const char* key;
    int64_t* value;
  };
  for (const Field& field :
       std::vector<Field>{{"hidden_size", &out.hidden_size},
                          {"intermediate_size", &out.intermediate_size},
                          {"num_hidden_layers", &out.num_hidden_layers},
                          {"num_attention_heads", &out.num_attention_heads},
                          {"num_channels", &out.num_channels},
                          {"image_size", &out.image_size},
                          {"patch_size", &out.patch_size}}) {
    absl::StatusOr<int64_t> value = config.GetSize(field.key, *field.value);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  // image_size need not divide by patch_size: the patch convolution (stride
  // = kernel, no padding) drops the remainder, as in transformers, e.g.
  // siglip-so400m-patch14-384 has 27 x 27 patches of 14 covering 378 pixels.
  if (out.hidden_size % out.num_attention_heads != 0 ||
      out.image_size < out.patch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": hidden_size (", out.hidden_size,
        ") must divide by num_attention_heads (", out.num_attention_heads,
        ") and image_size (", out.image_size, ") be at least patch_size (",
        out.patch_size, ")"));
  }
  auto eps = config.GetDouble("layer_norm_eps", defaults.layer_norm_eps);
  auto act = config.GetString("hidden_act", default_activation);
  auto use_head = config.GetBool("vision_use_head", defaults.use_head);
  if (!eps.ok()) return eps.status();
  if (!act.ok()) return act.status();
  if (!use_head.ok()) return use_head.status();
  absl::StatusOr<Activation> activation = ParseActivation(*act);
  if (!activation.ok()) return activation.status();
  out.layer_norm_eps = *eps;
  out.hidden_act = *activation;
  out.use_head = *use_head;
  return out;
}

Conv2d::Options PatchConv2d(const VisionTowerConfig& config, bool bias) {
  Conv2d::Options options;
  options.in_channels = config.num_channels;
  options.out_channels = config.hidden_size;
  options.kernel_size = config.patch_size;
  options.stride = config.patch_size;
  options.bias = bias;
  return options;
}

VisionMlp::VisionMlp(const std::string& name, const std::string& kind,
                     Activation activation)
    : Module(name, kind), activation_(activation) {}

absl::StatusOr<std::unique_ptr<VisionMlp>> VisionMlp::Create(
    const std::string& name, const std::string& kind_prefix,
    const VisionTowerConfig& config, const WeightFactory& weights) {
  auto mlp = std::unique_ptr<VisionMlp>(
      new VisionMlp(name, kind_prefix + "MLP", config.hidden_act));
  auto fc1 = Linear::Create(name + ".fc1", weights, config.hidden_size,
                            config.intermediate_size, /*bias=*/true);
  if (!fc1.ok()) return fc1.status();
  mlp->fc1_ = mlp->AddChild(*std::move(fc1));
  auto fc2 = Linear::Create(name + ".fc2", weights, config.intermediate_size,
                            config.hidden_size, /*bias=*/true);
  if (!fc2.ok()) return fc2.status();
  mlp->fc2_ = mlp->AddChild(*std::move(fc2));
  return mlp;
}

at::Tensor VisionMlp::Forward(ForwardContext& ctx, const at::Tensor& x) const {
  ModuleCall call(*this, ctx);
  return fc2_->Forward(ctx, fc1_->ForwardActivated(ctx, x, activation_));
}

absl::StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Create(
    const std::string& name, const std::string& kind_prefix,
    const VisionTowerConfig& config, const WeightFactory& weights) {
  auto encoder = std::unique_ptr<VisionEncoder>(
      new VisionEncoder(name, kind_prefix + "Encoder"));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = VisionEncoderLayer::Create(absl::StrCat(name, ".layers.", i),
                                            kind_prefix, config, weights);
    if (!layer.ok()) return layer.status();
    encoder->layers_.push_back(encoder->AddChild(*std::move(layer)));
  }
  return encoder;
}

at::Tensor VisionEncoder::Forward(ForwardContext& ctx, const at::Tensor& x,
                                  const at::Tensor& attention_bias) const {
  ModuleCall call(*this, ctx);
  at::Tensor h = x;
  for (const VisionEncoderLayer* layer : layers_) {
    h = layer->Forward(ctx, h, attention_bias);
  }
  return h;
}

namespace {

// torch.nn.MultiheadAttention as SigLIP's head uses it (batch first, packed
// in_proj_weight/in_proj_bias, out_proj a Linear child).
class PoolingAttention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<PoolingAttention>> Create(
      const std::string& name, const VisionTowerConfig& config,
      const WeightFactory& weights) {
    auto attention =
        std::unique_ptr<PoolingAttention>(new PoolingAttention(name, config));
    const int64_t hidden = config.hidden_size;
    absl::Status status = AddParameter(*attention, weights, "in_proj_weight",
                                       {3 * hidden, hidden});
    if (status.ok()) {
      status = AddParameter(*attention, weights, "in_proj_bias", {3 * hidden});
    }
    if (!status.ok()) return status;
    auto out = Linear::Create(name + ".out_proj", weights, hidden, hidden,
                              /*bias=*/true);
    if (!out.ok()) return out.status();
    attention->out_ = attention->AddChild(*std::move(out));
    return attention;
  }

  // query [batch, q_len, hidden] attends over x [batch, tokens, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& query,
                     const at::Tensor& x) const {
    ModuleCall call(*this, ctx);
    std::vector<at::Tensor> w = Param(ctx, "in_proj_weight").chunk(3, 0);
    std::vector<at::Tensor> b = Param(ctx, "in_proj_bias").chunk(3, 0);
    at::Tensor attended = ScaledDotProductAttention(
        SplitHeads(LinearProduct(query, w[0], b[0]), heads_),
        SplitHeads(LinearProduct(x, w[1], b[1]), heads_),
        SplitHeads(LinearProduct(x, w[2], b[2]), heads_), at::Tensor(), scale_);
    return out_->Forward(ctx, MergeHeads(attended));
  }

 private:
  PoolingAttention(const std::string& name, const VisionTowerConfig& config)
      : Module(name, "MultiheadAttention"),
        heads_(config.num_attention_heads),
        scale_(std::pow(static_cast<double>(config.hidden_size /
                                            config.num_attention_heads),
                        -0.5)) {}

  const int64_t heads_;
  const double scale_;
  const Linear* out_ = nullptr;
};

// A learned probe attends over the tokens; then h + mlp(layernorm(h)); the
// pooled vector is the probe's row.
class PoolingHead : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<PoolingHead>> Create(
      const std::string& name, const VisionTowerConfig& config,
      const WeightFactory& weights) {
    auto head = std::unique_ptr<PoolingHead>(
        new PoolingHead(name, "SiglipMultiheadAttentionPoolingHead"));
    absl::Status probe =
        AddParameter(*head, weights, "probe", {1, 1, config.hidden_size});
    if (!probe.ok()) return probe;
    auto attention =
        PoolingAttention::Create(name + ".attention", config, weights);
    if (!attention.ok()) return attention.status();
    head->attention_ = head->AddChild(*std::move(attention));
    auto norm = MakeVisionLayerNorm(name + ".layernorm", config, weights);
    if (!norm.ok()) return norm.status();
    head->norm_ = head->AddChild(*std::move(norm));
    auto mlp = VisionMlp::Create(name + ".mlp", "Siglip", config, weights);
    if (!mlp.ok()) return mlp.status();
    head->mlp_ = head->AddChild(*std::move(mlp));
    return head;
  }

  // x [batch, tokens, hidden] -> [batch, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const {
    ModuleCall call(*this, ctx);
    at::Tensor probe = Param(ctx, "probe").expand({x.size(0), 1, x.size(2)});
    at::Tensor h = attention_->Forward(ctx, probe, x);
    h = h + mlp_->Forward(ctx, norm_->Forward(ctx, h));
    return h.select(1, 0);
  }

 private:
  using Module::Module;
  const PoolingAttention* attention_ = nullptr;
  const LayerNorm* norm_ = nullptr;
  const VisionMlp* mlp_ = nullptr;
};

// Patch Conv2d (stride = kernel = patch size) plus a learned position
// embedding per patch.
class PatchEmbeddings : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<PatchEmbeddings>> Create(
      const std::string& name, const VisionTowerConfig& config,
      const WeightFactory& weights) {
    auto embeddings = std::unique_ptr<PatchEmbeddings>(
        new PatchEmbeddings(name, "SiglipVisionEmbeddings"));
    auto patch = Conv2d::Create(name + ".patch_embedding", weights,
                                PatchConv2d(config, /*bias=*/true));
    if (!patch.ok()) return patch.status();
    embeddings->patch_ = embeddings->AddChild(*std::move(patch));
    auto position = Embedding::Create(name + ".position_embedding", weights,
                                      config.num_patches(), config.hidden_size);
    if (!position.ok()) return position.status();
    embeddings->position_ = embeddings->AddChild(*std::move(position));
    embeddings->num_patches_ = config.num_patches();
    return embeddings;
  }

  // pixels [batch, channels, size, size] -> [batch, patches, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& pixels) const {
    ModuleCall call(*this, ctx);
    at::Tensor patches =
        patch_->Forward(ctx, pixels).flatten(2).transpose(1, 2);
    at::Tensor ids =
        at::arange(num_patches_,
                   at::TensorOptions(at::kLong).device(pixels.device()))
            .unsqueeze(0);
    return patches + position_->Forward(ctx, ids).to(patches.scalar_type());
  }

 private:
  using Module::Module;
  const Conv2d* patch_ = nullptr;
  const Embedding* position_ = nullptr;
  int64_t num_patches_ = 0;
};

}  // namespace

VisionTowerModel::VisionTowerModel(std::string architecture,
                                   std::string root_kind,
                                   const VisionTowerConfig& config,
                                   std::vector<TensorSpec> outputs,
                                   std::unique_ptr<VisionTransformer> tower,
                                   const WeightFactory& weights)
    : compute_dtype_(weights.compute_scalar_type()),
      device_(weights.options().device),
      root_("", std::move(root_kind)),
      architecture_(std::move(architecture)),
      inputs_(
          {{"pixel_values",
            at::kFloat,
            {-1, config.num_channels, config.image_size, config.image_size}}}),
      outputs_(std::move(outputs)) {
  tower_ = root_.AddChild(std::move(tower));
}

NamedTensors VisionTowerModel::ForwardImpl(ForwardContext& ctx,
                                           const NamedTensors& inputs) const {
  ModuleCall root_call(root_, ctx);
  VisionTransformer::Output out =
      tower_->Forward(ctx, inputs.at("pixel_values").to(compute_dtype_));
  NamedTensors outputs{
      {"last_hidden_state", out.last_hidden_state.to(at::kFloat)}};
  if (out.pooled.defined()) {
    outputs["pooler_output"] = out.pooled.to(at::kFloat);
  }
  return outputs;
}

absl::Status VisionTowerModel::ValidateInputs(
    const NamedTensors& inputs) const {
  if (inputs.at("pixel_values").size(0) == 0) {
    return absl::InvalidArgumentError("input 'pixel_values' has batch 0");
  }
  return absl::OkStatus();
}

namespace {

// embeddings -> encoder -> post_layernorm, then the attention-pooling head
// when the config has one.
class SiglipVisionTransformer : public VisionTransformer {
 public:
  static absl::StatusOr<std::unique_ptr<SiglipVisionTransformer>> Create(
      const VisionTowerConfig& config, const WeightFactory& weights) {
    const std::string name = "vision_model";
    auto tower = std::unique_ptr<SiglipVisionTransformer>(
        new SiglipVisionTransformer(name, "SiglipVisionTransformer"));
    auto embeddings =
        PatchEmbeddings::Create(name + ".embeddings", config, weights);
    if (!embeddings.ok()) return embeddings.status();
    tower->embeddings_ = tower->AddChild(*std::move(embeddings));
    auto encoder =
        VisionEncoder::Create(name + ".encoder", "Siglip", config, weights);
    if (!encoder.ok()) return encoder.status();
    tower->encoder_ = tower->AddChild(*std::move(encoder));
    auto post_norm =
        MakeVisionLayerNorm(name + ".post_layernorm", config, weights);
    if (!post_norm.ok()) return post_norm.status();
    tower->post_norm_ = tower->AddChild(*std::move(post_norm));
    if (!config.use_head) return tower;
    auto head = PoolingHead::Create(name + ".head", config, weights);
    if (!head.ok()) return head.status();
    tower->head_ = tower->AddChild(*std::move(head));
    return tower;
  }

  Output Forward(ForwardContext& ctx, const at::Tensor& pixels) const override {
    ModuleCall call(*this, ctx);
    at::Tensor hidden =
        encoder_->Forward(ctx, embeddings_->Forward(ctx, pixels));
    hidden = post_norm_->Forward(ctx, hidden);
    at::Tensor pooled;
    if (head_ != nullptr) pooled = head_->Forward(ctx, hidden);
    return {hidden, pooled};
  }

 private:
  using VisionTransformer::VisionTransformer;
  const PatchEmbeddings* embeddings_ = nullptr;
  const VisionEncoder* encoder_ = nullptr;
  const LayerNorm* post_norm_ = nullptr;
  const PoolingHead* head_ = nullptr;
};

const ArchitectureRegistration kSiglipVision("siglip_vision_model",
                                             &CreateSiglipVisionModel);

}  // namespace

absl::StatusOr<std::unique_ptr<VisionTransformer>>
CreateSiglipVisionTransformer(const VisionTowerConfig& config,
                              const WeightFactory& weights) {
  auto tower = SiglipVisionTransformer::Create(config, weights);
  if (!tower.ok()) return tower.status();
  return std::unique_ptr<VisionTransformer>(*std::move(tower));
}

absl::StatusOr<std::unique_ptr<Model>> CreateSiglipVisionTower(
    const VisionTowerConfig& config, const WeightFactory& weights) {
  std::vector<TensorSpec> outputs = {
      {"last_hidden_state",
       at::kFloat,
       {-1, config.num_patches(), config.hidden_size}}};
  if (config.use_head) {
    outputs.push_back({"pooler_output", at::kFloat, {-1, config.hidden_size}});
  }
  auto tower = CreateSiglipVisionTransformer(config, weights);
  if (!tower.ok()) return tower.status();
  return std::unique_ptr<Model>(
      new VisionTowerModel("siglip_vision_model", "SiglipVisionModel", config,
                           std::move(outputs), *std::move(tower), weights));
}

absl::StatusOr<std::unique_ptr<Model>> CreateSiglipVisionModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  absl::StatusOr<HfConfig> vision = VisionConfigOf(config);
  if (!vision.ok()) return vision.status();
  absl::StatusOr<VisionTowerConfig> tower = VisionTowerConfig::FromHf(
      *vision, VisionTowerConfig{}, "gelu_pytorch_tanh");
  if (!tower.ok()) return tower.status();
  absl::StatusOr<WeightFactory> weights =
      VisionTowerWeights(std::move(checkpoint), options);
  if (!weights.ok()) return weights.status();
  return CreateSiglipVisionTower(*tower, *weights);
}

}  // namespace castserve::models
