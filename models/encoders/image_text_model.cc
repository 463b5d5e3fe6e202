#include "models/encoders/image_text_model.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "models/encoders/encoder_blocks.h"
#include "models/encoders/encoder_model.h"
#include "models/layers/attention.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

// Token plus learned position embeddings (positions 0..seq-1).
class TextEmbeddings : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<TextEmbeddings>> Create(
      const std::string& name, const std::string& kind,
      const TextTowerConfig& config, const WeightFactory& weights) {
    auto e = std::unique_ptr<TextEmbeddings>(new TextEmbeddings(name, kind));
    const int64_t hidden = config.encoder.hidden_size;
    absl::Status status =
        Adopt(*e,
              Embedding::Create(name + ".token_embedding", weights,
                                config.vocab_size, hidden),
              &e->token_);
    if (status.ok()) {
      status = Adopt(*e,
                     Embedding::Create(name + ".position_embedding", weights,
                                       config.max_position_embeddings, hidden),
                     &e->position_);
    }
    if (!status.ok()) return status;
    return e;
  }

  // ids [batch, seq] -> [batch, seq, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& ids) const {
    ModuleCall call(*this, ctx);
    at::Tensor positions = at::arange(ids.size(1), ids.options()).unsqueeze(0);
    return token_->Forward(ctx, ids) + position_->Forward(ctx, positions);
  }

 private:
  using Module::Module;
  Embedding* token_ = nullptr;
  Embedding* position_ = nullptr;
};

// Each row's real tokens (mask != 0), in order, then pad_id up to `length`.
at::Tensor RepadRows(const at::Tensor& ids, const at::Tensor& mask,
                     int64_t length, int64_t pad_id) {
  const at::Tensor real = mask.ne(0);
  // Padding goes to a spare last column, dropped after the scatter.
  const at::Tensor target = at::where(real, real.cumsum(1) - 1, length);
  at::Tensor out = at::full({ids.size(0), length + 1}, pad_id, ids.options());
  out.scatter_(1, target, ids);
  return out.narrow(1, 0, length);
}

// The text transformer ("text_model"): embeddings, the pre-norm encoder,
// final_layer_norm, the pooled position and the optional head.
class TextTransformer : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<TextTransformer>> Create(
      const std::string& prefix, const TextTowerConfig& config,
      const WeightFactory& weights) {
    const std::string name = "text_model";
    auto t = std::unique_ptr<TextTransformer>(
        new TextTransformer(name, prefix + "TextModel", config));
    absl::Status status = Adopt(
        *t,
        TextEmbeddings::Create(name + ".embeddings", prefix + "TextEmbeddings",
                               config, weights),
        &t->embeddings_);
    if (status.ok()) {
      status = Adopt(*t,
                     VisionEncoder::Create(name + ".encoder", prefix,
                                           config.encoder, weights),
                     &t->encoder_);
    }
    if (status.ok()) {
      status = Adopt(*t,
                     MakeVisionLayerNorm(name + ".final_layer_norm",
                                         config.encoder, weights),
                     &t->final_norm_);
    }
    if (status.ok() && !config.head.empty()) {
      status = Adopt(*t,
                     Linear::Create(name + "." + config.head, weights,
                                    config.encoder.hidden_size,
                                    config.head_size, /*bias=*/true),
                     &t->head_);
    }
    if (!status.ok()) return status;
    return t;
  }

  // ids [batch, seq] (mask the same shape, or undefined) -> the pooled
  // state [batch, hidden or head_size] in the compute dtype.
  at::Tensor Forward(ForwardContext& ctx, at::Tensor ids, at::Tensor mask,
                     at::ScalarType compute_dtype) const {
    ModuleCall call(*this, ctx);
    if (config_.pooling == TextPooling::kLastPadded && mask.defined()) {
      ids = RepadRows(ids, mask, config_.max_position_embeddings,
                      config_.pad_token_id);
      mask = at::Tensor();
    }
    at::Tensor bias;
    if (config_.causal || (mask.defined() && !mask.ne(0).all().item<bool>())) {
      bias =
          MakeAttentionBias(mask, ids.size(0), ids.size(1), ids.size(1),
                            config_.causal, ids.options().dtype(compute_dtype));
    }
    at::Tensor hidden = embeddings_->Forward(ctx, ids).to(compute_dtype);
    hidden = final_norm_->Forward(ctx, encoder_->Forward(ctx, hidden, bias));
    at::Tensor pooled = hidden.index(
        {at::arange(ids.size(0), ids.options()), PooledPositions(ids)});
    return head_ != nullptr ? head_->Forward(ctx, pooled) : pooled;
  }

 private:
  TextTransformer(std::string name, std::string kind,
                  const TextTowerConfig& config)
      : Module(std::move(name), std::move(kind)), config_(config) {}

  // [batch]: the position pooled in each row.
  at::Tensor PooledPositions(const at::Tensor& ids) const {
    switch (config_.pooling) {
      case TextPooling::kFirstEos:
        return ids.eq(config_.eos_token_id).to(at::kInt).argmax(1);
      case TextPooling::kHighestId:
        return ids.argmax(1);
      case TextPooling::kLastPadded:
        break;
    }
    return at::full({ids.size(0)}, ids.size(1) - 1, ids.options());
  }

  const TextTowerConfig config_;
  TextEmbeddings* embeddings_ = nullptr;
  VisionEncoder* encoder_ = nullptr;
  LayerNorm* final_norm_ = nullptr;
  Linear* head_ = nullptr;
};

class ImageTextModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ImageTextSpec& spec,
      std::shared_ptr<const casting::Checkpoint> checkpoint,
      const WeightPolicyOptions& options);

  std::string architecture() const override { return spec_.model_type; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }
  casting::Device device() const override { return device_; }
  std::optional<int64_t> max_sequence_length() const override {
    return spec_.text.max_position_embeddings;
  }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& ctx,
                           const NamedTensors& inputs) const override;

 private:
  ImageTextModel(const ImageTextSpec& spec, at::ScalarType compute_dtype,
                 casting::Device device);
  absl::Status Build(const WeightFactory& weights);
  absl::Status ValidateText(const at::Tensor& ids,
                            const at::Tensor* mask) const;
  // A projection named `name` from `in` to projection_dim, or none.
  absl::Status AddProjection(const std::string& name, int64_t in,
                             const WeightFactory& weights, Linear** out);

  const ImageTextSpec spec_;
  const at::ScalarType compute_dtype_;
  const casting::Device device_;
  Module root_;
  VisionTransformer* vision_ = nullptr;
  TextTransformer* text_ = nullptr;
  Linear* image_projection_ = nullptr;
  Linear* text_projection_ = nullptr;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

// The width of an embedding: the projection's, else the pooled state's.
int64_t EmbeddingSize(const ImageTextSpec& spec, const std::string& projection,
                      int64_t pooled) {
  return projection.empty() ? pooled : spec.projection_dim;
}

ImageTextModel::ImageTextModel(const ImageTextSpec& spec,
                               at::ScalarType compute_dtype,
                               casting::Device device)
    : spec_(spec),
      compute_dtype_(compute_dtype),
      device_(device),
      root_("", spec.class_prefix + "Model") {
  const VisionTowerConfig& v = spec.vision;
  const int64_t text_pooled = spec.text.head.empty()
                                  ? spec.text.encoder.hidden_size
                                  : spec.text.head_size;
  inputs_ = {{"pixel_values",
              at::kFloat,
              {-1, v.num_channels, v.image_size, v.image_size},
              /*optional=*/true},
             {"input_ids", at::kLong, {-1, -1}, /*optional=*/true},
             {"attention_mask", at::kLong, {-1, -1}, /*optional=*/true}};
  outputs_ = {{"image_embeds",
               at::kFloat,
               {-1, EmbeddingSize(spec, spec.image_projection, v.hidden_size)}},
              {"text_embeds",
               at::kFloat,
               {-1, EmbeddingSize(spec, spec.text_projection, text_pooled)}}};
}

absl::Status ImageTextModel::AddProjection(const std::string& name, int64_t in,
                                           const WeightFactory& weights,
                                           Linear** out) {
  if (name.empty()) return absl::OkStatus();
  return Adopt(root_,
               Linear::Create(name, weights, in, spec_.projection_dim,
                              /*bias=*/false),
               out);
}

absl::Status ImageTextModel::Build(const WeightFactory& weights) {
  absl::Status status = Adopt(
      root_, TextTransformer::Create(spec_.class_prefix, spec_.text, weights),
      &text_);
  if (status.ok()) {
    status = Adopt(root_, spec_.make_vision(spec_.vision, weights), &vision_);
  }
  if (status.ok()) {
    status = AddProjection(spec_.image_projection, spec_.vision.hidden_size,
                           weights, &image_projection_);
  }
  if (status.ok()) {
    status =
        AddProjection(spec_.text_projection, spec_.text.encoder.hidden_size,
                      weights, &text_projection_);
  }
  return status;
}

absl::StatusOr<std::unique_ptr<Model>> ImageTextModel::Create(
    const ImageTextSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  WeightFactory weights(checkpoint, options);
  auto model = std::unique_ptr<ImageTextModel>(
      new ImageTextModel(spec, weights.compute_scalar_type(), options.device));
  absl::Status status = model->Build(weights);
  // Older transformers saved the position ids it recomputes as buffers.
  std::vector<std::string> unserved = spec.unserved_keys;
  unserved.push_back("text_model.embeddings.position_ids");
  unserved.push_back("vision_model.embeddings.position_ids");
  if (status.ok()) {
    status = RefuseUnreadTensors(model->root_, *checkpoint, unserved);
  }
  if (!status.ok()) return status;
  return std::unique_ptr<Model>(std::move(model));
}

absl::Status ImageTextModel::ValidateText(const at::Tensor& ids,
                                          const at::Tensor* mask) const {
  const TextTowerConfig& text = spec_.text;
  if (ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError("input 'input_ids' is empty");
  }
  if (ids.size(1) > text.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has ", ids.size(1),
                     " tokens, more than the text position table's ",
                     text.max_position_embeddings));
  }
  const int64_t low = ids.min().item<int64_t>();
  const int64_t high = ids.max().item<int64_t>();
  if (low < 0 || high >= text.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has value ", low < 0 ? low : high,
                     " outside [0, ", text.vocab_size, ") (the vocabulary)"));
  }
  if (mask != nullptr) {
    if (!mask->sizes().equals(ids.sizes())) {
      return absl::InvalidArgumentError(
          "input 'attention_mask' must have the shape of input_ids");
    }
    if (mask->lt(0).any().item<bool>() || mask->gt(1).any().item<bool>()) {
      return absl::InvalidArgumentError(
          "input 'attention_mask' has a value other than 0 or 1");
    }
  }
  if (text.pooling == TextPooling::kFirstEos) {
    // transformers would pool position 0 of such a row: a wrong answer.
    const at::Tensor missing = ids.eq(text.eos_token_id).any(1).logical_not();
    if (missing.any().item<bool>()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input 'input_ids': row ",
          missing.to(at::kInt).argmax().item<int64_t>(),
          " holds no end-of-text token (eos_token_id ", text.eos_token_id,
          "), whose state is the text's embedding"));
    }
  }
  return absl::OkStatus();
}

absl::Status ImageTextModel::ValidateInputs(const NamedTensors& inputs) const {
  auto pixels = inputs.find("pixel_values");
  auto ids = inputs.find("input_ids");
  auto mask = inputs.find("attention_mask");
  if (ids == inputs.end() && mask != inputs.end()) {
    return absl::InvalidArgumentError(
        "input 'attention_mask' needs 'input_ids'");
  }
  if (pixels == inputs.end() && ids == inputs.end()) {
    return absl::InvalidArgumentError(
        "the request has neither 'pixel_values' (images) nor 'input_ids' "
        "(text): send one or both");
  }
  if (pixels != inputs.end() && pixels->second.size(0) == 0) {
    return absl::InvalidArgumentError("input 'pixel_values' has batch 0");
  }
  if (ids == inputs.end()) return absl::OkStatus();
  if (pixels != inputs.end() && pixels->second.size(0) != ids->second.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs 'pixel_values' and 'input_ids' have batches ",
        pixels->second.size(0), " and ", ids->second.size(0),
        "; one request's images and texts share the batch dimension"));
  }
  return ValidateText(ids->second,
                      mask != inputs.end() ? &mask->second : nullptr);
}

NamedTensors ImageTextModel::ForwardImpl(ForwardContext& ctx,
                                         const NamedTensors& inputs) const {
  ModuleCall call(root_, ctx);
  NamedTensors outputs;
  auto ids = inputs.find("input_ids");
  if (ids != inputs.end()) {
    auto mask = inputs.find("attention_mask");
    at::Tensor pooled = text_->Forward(
        ctx, ids->second, mask != inputs.end() ? mask->second : at::Tensor(),
        compute_dtype_);
    if (text_projection_ != nullptr) {
      pooled = text_projection_->Forward(ctx, pooled);
    }
    outputs["text_embeds"] = pooled.to(at::kFloat);
  }
  auto pixels = inputs.find("pixel_values");
  if (pixels != inputs.end()) {
    at::Tensor pooled =
        vision_->Forward(ctx, pixels->second.to(compute_dtype_)).pooled;
    if (image_projection_ != nullptr) {
      pooled = image_projection_->Forward(ctx, pooled);
    }
    outputs["image_embeds"] = pooled.to(at::kFloat);
  }
  return outputs;
}

}  // namespace

absl::StatusOr<TextTowerConfig> ReadTextTowerConfig(
    const HfConfig& text_config, const TextTowerConfig& defaults,
    const std::string& default_activation) {
  TextTowerConfig out = defaults;
  absl::StatusOr<VisionTowerConfig> encoder = VisionTowerConfig::FromHf(
      text_config, defaults.encoder, default_activation);
  if (!encoder.ok()) return encoder.status();
  out.encoder = *encoder;
  struct Field {
    const char* key;
    int64_t* value;
    bool size;
  };
  for (const Field& field : std::vector<Field>{
           {"vocab_size", &out.vocab_size, true},
           {"max_position_embeddings", &out.max_position_embeddings, true},
           {"eos_token_id", &out.eos_token_id, false},
           {"pad_token_id", &out.pad_token_id, false}}) {
    absl::StatusOr<int64_t> value =
        field.size ? text_config.GetSize(field.key, *field.value)
                   : text_config.GetInt(field.key, *field.value);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Model>> CreateImageTextModel(
    const ImageTextSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  return ImageTextModel::Create(spec, std::move(checkpoint), options);
}

ImageTextRegistration::ImageTextRegistration(std::string model_type,
                                             ImageTextSpecReader read) {
  const ArchitectureRegistration registration(
      std::move(model_type),
      [read](const HfConfig& config,
             std::shared_ptr<const casting::Checkpoint> checkpoint,
             const WeightPolicyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Model>> {
        absl::StatusOr<ImageTextSpec> spec = read(config);
        if (!spec.ok()) return spec.status();
        return ImageTextModel::Create(*spec, std::move(checkpoint), options);
      });
}

}  // namespace castserve::models
