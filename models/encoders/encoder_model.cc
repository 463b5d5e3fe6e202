#include "models/encoders/encoder_model.h"

#include <ATen/ATen.h>

#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/encoders/encoder_blocks.h"
#include "models/layers/attention.h"
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

// Every checkpoint tensor must be read by a module of `root` (as a weight
// or a pre-quantized weight's scales) or start with one of
// `unserved_prefixes`.
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
  void DeclareSignature();
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
  std::vector<EncoderLayer*> layers_;
  Linear* pooler_ = nullptr;
  SequenceClassifier* classifier_ = nullptr;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

absl::Status EncoderModel::Build(const WeightFactory& weights,
                                 const WeightFactory& head) {
  absl::Status status =
      Adopt(root_, EncoderEmbeddings::Create(spec_, weights), &embeddings_);
  Module* encoder = root_.AddChild(
      std::make_unique<Module>("encoder", spec_.class_prefix + "Encoder"));
  for (int64_t i = 0; status.ok() && i < spec_.num_hidden_layers; ++i) {
    EncoderLayer* layer = nullptr;
    status = Adopt(
        *encoder,
        EncoderLayer::Create(absl::StrCat("encoder.layer.", i), spec_, weights),
        &layer);
    layers_.push_back(layer);
  }
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
             {"attention_mask", at::kLong, {-1, -1}, true},
             {"token_type_ids", at::kLong, {-1, -1}, true}};
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
  absl::StatusOr<std::string> prefix = FindKeyPrefix(
      *checkpoint, "embeddings.word_embeddings.weight", spec.key_prefixes);
  if (!prefix.ok()) return prefix.status();
  WeightFactory weights(checkpoint, options, *prefix);
  auto model = std::unique_ptr<EncoderModel>(
      new EncoderModel(spec, weights.compute_scalar_type(), options.device));
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

std::pair<at::Tensor, at::Tensor> EncoderModel::Encode(
    ForwardContext& context, const at::Tensor& ids, const at::Tensor& mask,
    const at::Tensor& types) const {
  // [batch, 1, 1, seq]: every query of a sequence sees its real tokens.
  // Without padding there is nothing to mask, and the fused attention runs
  // faster without a bias.
  at::Tensor additive_mask;
  if (!mask.ne(0).all().item<bool>()) {
    additive_mask = MakeAttentionBias(mask, mask.size(0), /*query_len=*/1,
                                      mask.size(1), /*causal=*/false,
                                      mask.options().dtype(compute_dtype_));
  }
  at::Tensor hidden = embeddings_->Forward(context, ids, types);
  for (const EncoderLayer* layer : layers_) {
    hidden = layer->Forward(context, hidden, additive_mask);
  }
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
