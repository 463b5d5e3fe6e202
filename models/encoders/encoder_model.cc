#include "models/encoders/encoder_model.h"

#include <ATen/ATen.h>

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/device/device_codec.h"
#include "models/encoders/encoder_blocks.h"
#include "models/encoders/gated_encoder_layer.h"
#include "models/layers/attention.h"
#include "models/layers/rotary.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

// The classifier after the encoder (EncoderHead): reads the first token's
// hidden state (through the pooler for kPooledClassifier).
class SequenceClassifier : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<SequenceClassifier>> Create(
      const EncoderSpec& spec, const WeightFactory& weights) {
    std::unique_ptr<SequenceClassifier> c(new SequenceClassifier(spec));
    const int64_t hidden = spec.hidden_size;
    const int64_t labels = static_cast<int64_t>(spec.labels.size());
    if (spec.head == EncoderHead::kPooledClassifier) {
      absl::Status status =
          Adopt(*c, Linear::Create("classifier", weights, hidden, labels, true),
                &c->out_);
      if (!status.ok()) return status;
      return c;
    }
    absl::Status status = Adopt(
        *c, Linear::Create("classifier.dense", weights, hidden, hidden, true),
        &c->dense_);
    if (status.ok()) {
      status = Adopt(
          *c,
          Linear::Create("classifier.out_proj", weights, hidden, labels, true),
          &c->out_);
    }
    if (!status.ok()) return status;
    return c;
  }

  // first [batch, hidden]: the first token's state, or the pooled one.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& first) const {
    ModuleCall call(*this, context);
    at::Tensor x = first;
    if (dense_ != nullptr) x = at::tanh(dense_->Forward(context, x));
    return out_->Forward(context, x);
  }

 private:
  // Named "classifier" as XLMRobertaClassificationHead is; BERT's
  // classifier is the Linear itself, so its holder is "head".
  explicit SequenceClassifier(const EncoderSpec& spec)
      : Module(
            spec.head == EncoderHead::kPooledClassifier ? "head" : "classifier",
            spec.class_prefix + "ClassificationHead") {}
  Linear* dense_ = nullptr;  // kFirstTokenClassifier only.
  Linear* out_ = nullptr;
};

}  // namespace

absl::Status RefuseUnreadTensors(
    Module& root, const casting::Checkpoint& checkpoint,
    const std::vector<std::string>& unserved_prefixes) {
  std::set<std::string> read;
  root.Visit([&](Module& module) {
    for (const auto& [local, weight] : module.weights()) {
      read.insert(weight->name());
      if (!weight->options().scales_entry.empty()) {
        read.insert(weight->options().scales_entry);
      }
    }
  });
  std::vector<std::string> unread;
  for (const casting::TensorEntry& entry : checkpoint.tensors()) {
    if (read.count(entry.name) > 0) continue;
    bool unserved = false;
    for (const std::string& prefix : unserved_prefixes) {
      unserved = unserved || absl::StartsWith(entry.name, prefix);
    }
    if (!unserved) unread.push_back(entry.name);
  }
  if (unread.empty()) return absl::OkStatus();
  constexpr size_t kNamed = 8;
  const size_t more = unread.size() > kNamed ? unread.size() - kNamed : 0;
  unread.resize(unread.size() - more);
  return absl::InvalidArgumentError(absl::StrCat(
      "the checkpoint holds tensors this architecture does not read: ",
      absl::StrJoin(unread, ", "),
      more > 0 ? absl::StrCat(" and ", more, " more") : ""));
}

namespace {

// Sets spec.names to the first of its names (spec.names, then
// spec.other_names) whose embeddings norm `checkpoint` holds under one of
// the key prefixes, and returns that prefix; NotFound listing the keys
// tried for spec.names otherwise.
absl::StatusOr<std::string> ResolveNames(const casting::Checkpoint& checkpoint,
                                         EncoderSpec& spec) {
  absl::StatusOr<std::string> first = FindKeyPrefix(
      checkpoint, spec.names.embeddings_norm + ".weight", spec.key_prefixes);
  for (const EncoderNames& names : spec.other_names) {
    if (first.ok()) break;
    absl::StatusOr<std::string> prefix = FindKeyPrefix(
        checkpoint, names.embeddings_norm + ".weight", spec.key_prefixes);
    if (prefix.ok()) {
      spec.names = names;
      return prefix;
    }
  }
  spec.other_names.clear();
  return first;
}

class EncoderModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const EncoderSpec& spec,
      std::shared_ptr<const casting::Checkpoint> checkpoint,
      const WeightPolicyOptions& options);

  std::string architecture() const override { return spec_.model_type; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }
  casting::Device device() const override { return device_; }
  std::optional<int64_t> max_sequence_length() const override {
    return spec_.max_sequence_length();
  }
  std::vector<std::string> output_labels() const override {
    return spec_.labels;
  }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override;

 private:
  EncoderModel(const EncoderSpec& spec, at::ScalarType compute_dtype,
               casting::Device device)
      : spec_(spec),
        compute_dtype_(compute_dtype),
        device_(device),
        root_("", spec.class_prefix + "Model") {}
  absl::Status Build(const WeightFactory& backbone, const WeightFactory& head);
  absl::Status BuildLayers(const WeightFactory& weights);
  void DeclareSignature();
  // What every layer of a forward over `mask` [batch, seq] shares.
  EncoderStep MakeStep(const at::Tensor& mask) const;
  // last_hidden_state and, with a pooler, the pooled state.
  std::pair<at::Tensor, at::Tensor> Encode(ForwardContext& context,
                                           const at::Tensor& ids,
                                           const at::Tensor& mask,
                                           const at::Tensor& types) const;

  const EncoderSpec spec_;
  const at::ScalarType compute_dtype_;
  const casting::Device device_;
  Module root_;
  EncoderEmbeddings* embeddings_ = nullptr;
  std::vector<EncoderBlock*> layers_;
  LayerNorm* final_norm_ = nullptr;
  std::vector<at::Tensor> inverse_frequencies_;  // Per spec_.ropes entry.
  Linear* pooler_ = nullptr;
  SequenceClassifier* classifier_ = nullptr;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

absl::Status EncoderModel::BuildLayers(const WeightFactory& weights) {
  Module* encoder = &root_;
  if (spec_.layer_kind == EncoderLayerKind::kBert) {
    encoder = root_.AddChild(
        std::make_unique<Module>("encoder", spec_.class_prefix + "Encoder"));
  }
  absl::Status status = absl::OkStatus();
  for (int64_t i = 0; status.ok() && i < spec_.num_hidden_layers; ++i) {
    if (spec_.layer_kind == EncoderLayerKind::kBert) {
      EncoderLayer* layer = nullptr;
      status =
          Adopt(*encoder,
                EncoderLayer::Create(absl::StrCat(spec_.names.layers, ".", i),
                                     spec_, weights),
                &layer);
      layers_.push_back(layer);
    } else {
      GatedEncoderLayer* layer = nullptr;
      status =
          Adopt(*encoder, GatedEncoderLayer::Create(i, spec_, weights), &layer);
      layers_.push_back(layer);
    }
  }
  for (const EncoderRope& rope : spec_.ropes) {
    RopeOptions options;
    options.head_dim = spec_.hidden_size / spec_.num_attention_heads;
    options.theta = rope.theta;
    inverse_frequencies_.push_back(
        casting::ToDevice(RopeInverseFrequencies(options), device_));
  }
  if (status.ok() && !spec_.names.final_norm.empty()) {
    status = Adopt(root_,
                   LayerNorm::Create(spec_.names.final_norm, weights,
                                     spec_.hidden_size, spec_.layer_norm_eps),
                   &final_norm_);
  }
  return status;
}

absl::Status EncoderModel::Build(const WeightFactory& weights,
                                 const WeightFactory& head) {
  absl::Status status =
      Adopt(root_, EncoderEmbeddings::Create(spec_, weights), &embeddings_);
  if (status.ok()) status = BuildLayers(weights);
  // A classifier through the pooler needs it; a first-token one has none.
  const bool pooler = spec_.head == EncoderHead::kPooledClassifier ||
                      (spec_.head == EncoderHead::kNone &&
                       weights.Has("pooler.dense", "weight"));
  if (status.ok() && pooler) {
    Module* module = root_.AddChild(
        std::make_unique<Module>("pooler", spec_.class_prefix + "Pooler"));
    status = Adopt(*module,
                   Linear::Create("pooler.dense", weights, spec_.hidden_size,
                                  spec_.hidden_size, true),
                   &pooler_);
  }
  if (status.ok() && spec_.head != EncoderHead::kNone) {
    status =
        Adopt(root_, SequenceClassifier::Create(spec_, head), &classifier_);
  }
  return status;
}

void EncoderModel::DeclareSignature() {
  inputs_ = {{"input_ids", at::kLong, {-1, -1}, false},
             {"attention_mask", at::kLong, {-1, -1}, true}};
  if (!spec_.names.token_type_embeddings.empty()) {
    inputs_.push_back({"token_type_ids", at::kLong, {-1, -1}, true});
  }
  if (classifier_ != nullptr) {
    outputs_ = {{kScoresOutput,
                 at::kFloat,
                 {-1, static_cast<int64_t>(spec_.labels.size())}}};
    return;
  }
  outputs_ = {{"last_hidden_state", at::kFloat, {-1, -1, spec_.hidden_size}}};
  if (pooler_ != nullptr) {
    outputs_.push_back({"pooler_output", at::kFloat, {-1, spec_.hidden_size}});
  }
}

absl::StatusOr<std::unique_ptr<Model>> EncoderModel::Create(
    const EncoderSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  if (absl::Status valid = ValidateEncoderSpec(spec); !valid.ok()) {
    return valid;
  }
  EncoderSpec resolved = spec;
  absl::StatusOr<std::string> prefix = ResolveNames(*checkpoint, resolved);
  if (!prefix.ok()) return prefix.status();
  WeightFactory weights(checkpoint, options, *prefix);
  auto model = std::unique_ptr<EncoderModel>(new EncoderModel(
      resolved, weights.compute_scalar_type(), options.device));
  absl::Status status = model->Build(weights, weights.WithKeyPrefix(""));
  // Older transformers saved the position ids it recomputes as a buffer.
  std::vector<std::string> unserved = spec.unserved_key_prefixes;
  unserved.push_back(*prefix + "embeddings.position_ids");
  if (status.ok()) {
    status = RefuseUnreadTensors(model->root_, *checkpoint, unserved);
  }
  if (!status.ok()) return status;
  model->DeclareSignature();
  return std::unique_ptr<Model>(std::move(model));
}

// InvalidArgument unless every value of `tensor` lies in [0, limit).
absl::Status CheckRange(const std::string& name, const at::Tensor& tensor,
                        int64_t limit, absl::string_view what) {
  const int64_t low = tensor.min().item<int64_t>();
  const int64_t high = tensor.max().item<int64_t>();
  if (low >= 0 && high < limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("input '", name, "' has value ", low < 0 ? low : high,
                   " outside [0, ", limit, ") (", what, ")"));
}

absl::Status EncoderModel::ValidateInputs(const NamedTensors& inputs) const {
  const at::Tensor& ids = inputs.at("input_ids");
  if (ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError("input 'input_ids' is empty");
  }
  if (ids.size(1) > spec_.max_sequence_length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has ", ids.size(1),
                     " tokens, more than the position table's ",
                     spec_.max_sequence_length()));
  }
  absl::Status status =
      CheckRange("input_ids", ids, spec_.vocab_size, "the vocabulary");
  // token_type_ids is no input of a model without a token type table (the
  // signature check refuses it).
  for (const char* name : {"attention_mask", "token_type_ids"}) {
    auto it = inputs.find(name);
    if (!status.ok() || it == inputs.end()) continue;
    if (!it->second.sizes().equals(ids.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' must have the shape of input_ids"));
    }
    const bool is_mask = std::string(name) == "attention_mask";
    status = CheckRange(name, it->second, is_mask ? 2 : spec_.type_vocab_size,
                        is_mask ? "0 or 1" : "the token type vocabulary");
  }
  return status;
}

EncoderStep EncoderModel::MakeStep(const at::Tensor& mask) const {
  EncoderStep step;
  const at::TensorOptions options = mask.options().dtype(compute_dtype_);
  // [batch, 1, 1, seq]: every query of a sequence sees its real tokens.
  // Without padding there is nothing to mask, and the fused attention runs
  // faster without a bias.
  const bool padded = !mask.ne(0).all().item<bool>();
  step.biases[0] =
      padded ? MakeAttentionBias(mask, mask.size(0), /*query_len=*/1,
                                 mask.size(1), /*causal=*/false, options)
             : at::Tensor();
  for (const EncoderLayerAttention& layer : spec_.layer_attention) {
    if (layer.window == 0 || step.biases.count(layer.window) > 0) continue;
    step.biases[layer.window] =
        MakeBandAttentionBias(mask, layer.window, options);
  }
  const at::Tensor positions = EncoderEmbeddings::PositionIds(spec_, mask);
  for (const at::Tensor& inverse_frequencies : inverse_frequencies_) {
    step.ropes.push_back(RopeCosSin(inverse_frequencies, positions));
  }
  return step;
}

std::pair<at::Tensor, at::Tensor> EncoderModel::Encode(
    ForwardContext& context, const at::Tensor& ids, const at::Tensor& mask,
    const at::Tensor& types) const {
  const EncoderStep step = MakeStep(mask);
  at::Tensor hidden = embeddings_->Forward(context, ids, types);
  for (const EncoderBlock* layer : layers_) {
    hidden = layer->Forward(context, hidden, step);
  }
  if (final_norm_ != nullptr) hidden = final_norm_->Forward(context, hidden);
  at::Tensor pooled;
  if (pooler_ != nullptr) {
    pooled = at::tanh(pooler_->Forward(context, hidden.select(1, 0)));
  }
  return {hidden, pooled};
}

NamedTensors EncoderModel::ForwardImpl(ForwardContext& context,
                                       const NamedTensors& inputs) const {
  ModuleCall call(root_, context);
  const at::Tensor& ids = inputs.at("input_ids");
  auto mask_it = inputs.find("attention_mask");
  auto types_it = inputs.find("token_type_ids");
  at::Tensor mask =
      mask_it != inputs.end() ? mask_it->second : at::ones_like(ids);
  at::Tensor types =
      types_it != inputs.end() ? types_it->second : at::zeros_like(ids);
  auto [hidden, pooled] = Encode(context, ids, mask, types);
  if (classifier_ != nullptr) {
    at::Tensor first = pooled.defined() ? pooled : hidden.select(1, 0);
    return {
        {kScoresOutput, classifier_->Forward(context, first).to(at::kFloat)}};
  }
  NamedTensors outputs = {{"last_hidden_state", hidden.to(at::kFloat)}};
  if (pooled.defined()) outputs["pooler_output"] = pooled.to(at::kFloat);
  return outputs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateEncoderModel(
    const EncoderSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  return EncoderModel::Create(spec, std::move(checkpoint), options);
}

EncoderRegistration::EncoderRegistration(std::string model_type,
                                         EncoderSpecReader read) {
  // The factory reads the spec with this registration's reader, not the one
  // config.json's model_type names: a model config's `architecture`
  // override (LoadHfModel) chooses the encoder.
  const ArchitectureRegistration registration(
      std::move(model_type),
      [read](const HfConfig& config,
             std::shared_ptr<const casting::Checkpoint> checkpoint,
             const WeightPolicyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Model>> {
        absl::StatusOr<EncoderSpec> spec = read(config);
        if (!spec.ok()) return spec.status();
        return EncoderModel::Create(*spec, std::move(checkpoint), options);
      });
}

}  // namespace castserve::models
