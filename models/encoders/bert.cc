#include "models/encoders/bert.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/layers/attention.h"
#include "models/layers/layers.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

// Moves a freshly made child into `parent` and stores its address in `out`,
// or returns the error that made it fail.
template <typename T>
absl::Status Adopt(Module& parent, absl::StatusOr<std::unique_ptr<T>> child,
                   T** out) {
  if (!child.ok()) return child.status();
  *out = parent.AddChild(*std::move(child));
  return absl::OkStatus();
}

class BertEmbeddings : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<BertEmbeddings>> Create(
      const BertConfig& config, const WeightFactory& weights) {
    std::unique_ptr<BertEmbeddings> e(new BertEmbeddings());
    const int64_t hidden = config.hidden_size;
    absl::Status status =
        Adopt(*e,
              Embedding::Create("embeddings.word_embeddings", weights,
                                config.vocab_size, hidden),
              &e->word_);
    if (status.ok()) {
      status =
          Adopt(*e,
                Embedding::Create("embeddings.position_embeddings", weights,
                                  config.max_position_embeddings, hidden),
                &e->position_);
    }
    if (status.ok()) {
      status = Adopt(*e,
                     Embedding::Create("embeddings.token_type_embeddings",
                                       weights, config.type_vocab_size, hidden),
                     &e->token_type_);
    }
    if (status.ok()) {
      status = Adopt(*e,
                     LayerNorm::Create("embeddings.LayerNorm", weights, hidden,
                                       config.layer_norm_eps),
                     &e->norm_);
    }
    if (!status.ok()) return status;
    return e;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& ids,
                     const at::Tensor& token_types) const {
    ModuleCall call(*this, context);
    at::Tensor positions = at::arange(ids.size(1), ids.options()).unsqueeze(0);
    at::Tensor sum = word_->Forward(context, ids) +
                     token_type_->Forward(context, token_types) +
                     position_->Forward(context, positions);
    return norm_->Forward(context, sum);
  }

 private:
  BertEmbeddings() : Module("embeddings", "BertEmbeddings") {}
  Embedding* word_ = nullptr;
  Embedding* position_ = nullptr;
  Embedding* token_type_ = nullptr;
  LayerNorm* norm_ = nullptr;
};

class BertSelfAttention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<BertSelfAttention>> Create(
      const std::string& name, const BertConfig& config,
      const WeightFactory& weights) {
    std::unique_ptr<BertSelfAttention> a(
        new BertSelfAttention(name, config.num_attention_heads));
    const int64_t hidden = config.hidden_size;
    absl::Status status = Adopt(
        *a, Linear::Create(name + ".query", weights, hidden, hidden, true),
        &a->query_);
    if (status.ok()) {
      status = Adopt(
          *a, Linear::Create(name + ".key", weights, hidden, hidden, true),
          &a->key_);
    }
    if (status.ok()) {
      status = Adopt(
          *a, Linear::Create(name + ".value", weights, hidden, hidden, true),
          &a->value_);
    }
    if (!status.ok()) return status;
    return a;
  }

  // x [b, s, hidden]; additive_mask [b, 1, 1, s] or undefined (no padding).
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& additive_mask) const {
    ModuleCall call(*this, context);
    const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2);
    const int64_t head_dim = hidden / heads_;
    auto split_heads = [&](const at::Tensor& t) {
      return t.view({batch, seq, heads_, head_dim}).transpose(1, 2);
    };
    at::Tensor q = split_heads(query_->Forward(context, x));
    at::Tensor k = split_heads(key_->Forward(context, x));
    at::Tensor v = split_heads(value_->Forward(context, x));
    const double scale = 1 / std::sqrt(static_cast<double>(head_dim));
    return ScaledDotProductAttention(q, k, v, additive_mask, scale)
        .transpose(1, 2)
        .reshape({batch, seq, hidden});
  }

 private:
  BertSelfAttention(std::string name, int64_t heads)
      : Module(std::move(name), "BertSelfAttention"), heads_(heads) {}
  int64_t heads_;
  Linear* query_ = nullptr;
  Linear* key_ = nullptr;
  Linear* value_ = nullptr;
};

// A dense projection from `in_features` to hidden_size, added to the
// residual, then LayerNorm: BertSelfOutput and BertOutput.
class DenseAddNorm : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<DenseAddNorm>> Create(
      const std::string& name, const std::string& kind, int64_t in_features,
      const BertConfig& config, const WeightFactory& weights) {
    std::unique_ptr<DenseAddNorm> m(new DenseAddNorm(name, kind));
    absl::Status status =
        Adopt(*m,
              Linear::Create(name + ".dense", weights, in_features,
                             config.hidden_size, true),
              &m->dense_);
    if (status.ok()) {
      status =
          Adopt(*m,
                LayerNorm::Create(name + ".LayerNorm", weights,
                                  config.hidden_size, config.layer_norm_eps),
                &m->norm_);
    }
    if (!status.ok()) return status;
    return m;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& residual) const {
    ModuleCall call(*this, context);
    return norm_->Forward(context, dense_->Forward(context, x) + residual);
  }

 private:
  using Module::Module;
  Linear* dense_ = nullptr;
  LayerNorm* norm_ = nullptr;
};

class BertLayer : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<BertLayer>> Create(
      const std::string& name, const BertConfig& config,
      const WeightFactory& weights, Activation activation) {
    std::unique_ptr<BertLayer> l(new BertLayer(name, activation));
    Module* attention = l->AddChild(
        std::make_unique<Module>(name + ".attention", "BertAttention"));
    Module* intermediate = l->AddChild(
        std::make_unique<Module>(name + ".intermediate", "BertIntermediate"));
    absl::Status status = Adopt(
        *attention,
        BertSelfAttention::Create(name + ".attention.self", config, weights),
        &l->self_attention_);
    if (status.ok()) {
      status = Adopt(
          *attention,
          DenseAddNorm::Create(name + ".attention.output", "BertSelfOutput",
                               config.hidden_size, config, weights),
          &l->attention_output_);
    }
    if (status.ok()) {
      status = Adopt(
          *intermediate,
          Linear::Create(name + ".intermediate.dense", weights,
                         config.hidden_size, config.intermediate_size, true),
          &l->intermediate_);
    }
    if (status.ok()) {
      status =
          Adopt(*l,
                DenseAddNorm::Create(name + ".output", "BertOutput",
                                     config.intermediate_size, config, weights),
                &l->output_);
    }
    if (!status.ok()) return status;
    return l;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& additive_mask) const {
    ModuleCall call(*this, context);
    at::Tensor attended = attention_output_->Forward(
        context, self_attention_->Forward(context, x, additive_mask), x);
    at::Tensor inner =
        intermediate_->ForwardActivated(context, attended, activation_);
    return output_->Forward(context, inner, attended);
  }

 private:
  BertLayer(std::string name, Activation activation)
      : Module(std::move(name), "BertLayer"), activation_(activation) {}
  Activation activation_;
  BertSelfAttention* self_attention_ = nullptr;
  DenseAddNorm* attention_output_ = nullptr;
  Linear* intermediate_ = nullptr;
  DenseAddNorm* output_ = nullptr;
};

}  // namespace

// The root of the tree (name ""): embeddings, encoder layers, pooler.
class BertEncoderStack : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<BertEncoderStack>> Create(
      const BertConfig& config, const WeightFactory& weights) {
    absl::StatusOr<Activation> activation = ParseActivation(config.hidden_act);
    if (!activation.ok()) return activation.status();
    std::unique_ptr<BertEncoderStack> root(new BertEncoderStack());
    root->compute_dtype_ = weights.compute_scalar_type();
    absl::Status status = Adopt(*root, BertEmbeddings::Create(config, weights),
                                &root->embeddings_);
    Module* encoder =
        root->AddChild(std::make_unique<Module>("encoder", "BertEncoder"));
    for (int64_t i = 0; status.ok() && i < config.num_hidden_layers; ++i) {
      BertLayer* layer = nullptr;
      status = Adopt(*encoder,
                     BertLayer::Create(absl::StrCat("encoder.layer.", i),
                                       config, weights, *activation),
                     &layer);
      root->layers_.push_back(layer);
    }
    if (status.ok() && weights.Has("pooler.dense", "weight")) {
      Module* pooler =
          root->AddChild(std::make_unique<Module>("pooler", "BertPooler"));
      status = Adopt(*pooler,
                     Linear::Create("pooler.dense", weights, config.hidden_size,
                                    config.hidden_size, true),
                     &root->pooler_);
    }
    if (!status.ok()) return status;
    return root;
  }

  bool has_pooler() const { return pooler_ != nullptr; }

  // Returns last_hidden_state and (if there is a pooler) pooler_output, in
  // the compute dtype.
  std::pair<at::Tensor, at::Tensor> Forward(
      ForwardContext& context, const at::Tensor& ids, const at::Tensor& mask,
      const at::Tensor& token_types) const {
    ModuleCall call(*this, context);
    // [batch, 1, 1, seq]: every query of a sequence sees its real tokens.
    // Without padding there is nothing to mask, and the fused attention runs
    // faster without a bias.
    at::Tensor additive_mask;
    if (!mask.ne(0).all().item<bool>()) {
      additive_mask = MakeAttentionBias(
          mask, mask.size(0), /*query_len=*/1, mask.size(1),
          /*causal=*/false, mask.options().dtype(compute_dtype_));
    }
    at::Tensor hidden = embeddings_->Forward(context, ids, token_types);
    for (const BertLayer* layer : layers_) {
      hidden = layer->Forward(context, hidden, additive_mask);
    }
    at::Tensor pooled;
    if (pooler_ != nullptr) {
      pooled = at::tanh(pooler_->Forward(context, hidden.select(1, 0)));
    }
    return {hidden, pooled};
  }

 private:
  BertEncoderStack() : Module("", "BertModel") {}
  at::ScalarType compute_dtype_ = at::kFloat;
  BertEmbeddings* embeddings_ = nullptr;
  std::vector<BertLayer*> layers_;
  Linear* pooler_ = nullptr;
};

absl::StatusOr<BertConfig> BertConfig::FromHf(const HfConfig& hf) {
  BertConfig c;
  struct Field {
    const char* key;
    int64_t* value;
    bool required;
  };
  for (const Field& field : std::vector<Field>{
           {"vocab_size", &c.vocab_size, true},
           {"hidden_size", &c.hidden_size, true},
           {"num_hidden_layers", &c.num_hidden_layers, true},
           {"num_attention_heads", &c.num_attention_heads, true},
           {"intermediate_size", &c.intermediate_size, true},
           {"max_position_embeddings", &c.max_position_embeddings, false},
           {"type_vocab_size", &c.type_vocab_size, false}}) {
    absl::StatusOr<int64_t> value = field.required
                                        ? hf.GetSize(field.key)
                                        : hf.GetSize(field.key, *field.value);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  absl::StatusOr<double> eps = hf.GetDouble("layer_norm_eps", 1e-12);
  absl::StatusOr<std::string> act = hf.GetString("hidden_act", "gelu");
  absl::StatusOr<std::string> positions =
      hf.GetString("position_embedding_type", "absolute");
  if (!eps.ok()) return eps.status();
  if (!act.ok()) return act.status();
  if (!positions.ok()) return positions.status();
  if (*positions != "absolute") {
    return absl::InvalidArgumentError(
        absl::StrCat(hf.label(), ": position_embedding_type '", *positions,
                     "' is not supported (only 'absolute')"));
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        hf.label(), ": hidden_size ", c.hidden_size,
        " is not a multiple of num_attention_heads ", c.num_attention_heads));
  }
  c.layer_norm_eps = *eps;
  c.hidden_act = *act;
  return c;
}

absl::StatusOr<std::unique_ptr<BertModel>> BertModel::Create(
    const HfConfig& hf_config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  absl::StatusOr<BertConfig> config = BertConfig::FromHf(hf_config);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::string> prefix = FindKeyPrefix(
      *checkpoint, "embeddings.word_embeddings.weight", {"", "bert."});
  if (!prefix.ok()) return prefix.status();
  WeightFactory weights(std::move(checkpoint), options, *prefix);
  absl::StatusOr<std::unique_ptr<BertEncoderStack>> root =
      BertEncoderStack::Create(*config, weights);
  if (!root.ok()) return root.status();
  return std::unique_ptr<BertModel>(
      new BertModel(*std::move(config), *std::move(root), options.device));
}

BertModel::BertModel(BertConfig config, std::unique_ptr<BertEncoderStack> root,
                     casting::Device device)
    : config_(std::move(config)), device_(device), root_(std::move(root)) {
  inputs_ = {{"input_ids", at::kLong, {-1, -1}, false},
             {"attention_mask", at::kLong, {-1, -1}, true},
             {"token_type_ids", at::kLong, {-1, -1}, true}};
  outputs_ = {{"last_hidden_state", at::kFloat, {-1, -1, config_.hidden_size}}};
  if (root_->has_pooler()) {
    outputs_.push_back(
        {"pooler_output", at::kFloat, {-1, config_.hidden_size}});
  }
}

BertModel::~BertModel() = default;

Module& BertModel::root() { return *root_; }

namespace {

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

}  // namespace

absl::Status BertModel::ValidateInputs(const NamedTensors& inputs) const {
  const at::Tensor& ids = inputs.at("input_ids");
  if (ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError("input 'input_ids' is empty");
  }
  if (ids.size(1) > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has ", ids.size(1),
                     " tokens, more than the position table's ",
                     config_.max_position_embeddings));
  }
  absl::Status status =
      CheckRange("input_ids", ids, config_.vocab_size, "the vocabulary");
  for (const char* name : {"attention_mask", "token_type_ids"}) {
    auto it = inputs.find(name);
    if (!status.ok() || it == inputs.end()) continue;
    if (!it->second.sizes().equals(ids.sizes())) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' must have the shape of input_ids"));
    }
    const bool is_mask = std::string(name) == "attention_mask";
    status = CheckRange(name, it->second, is_mask ? 2 : config_.type_vocab_size,
                        is_mask ? "0 or 1" : "the token type vocabulary");
  }
  return status;
}

NamedTensors BertModel::ForwardImpl(ForwardContext& context,
                                    const NamedTensors& inputs) const {
  const at::Tensor& ids = inputs.at("input_ids");
  auto mask_it = inputs.find("attention_mask");
  auto types_it = inputs.find("token_type_ids");
  at::Tensor mask =
      mask_it != inputs.end() ? mask_it->second : at::ones_like(ids);
  at::Tensor types =
      types_it != inputs.end() ? types_it->second : at::zeros_like(ids);
  auto [hidden, pooled] = root_->Forward(context, ids, mask, types);
  NamedTensors outputs = {{"last_hidden_state", hidden.to(at::kFloat)}};
  if (pooled.defined()) outputs["pooler_output"] = pooled.to(at::kFloat);
  return outputs;
}

namespace {

const ArchitectureRegistration kBertRegistration(
    "bert",
    [](const HfConfig& config,
       std::shared_ptr<const casting::Checkpoint> checkpoint,
       const WeightPolicyOptions& options)
        -> absl::StatusOr<std::unique_ptr<Model>> {
      absl::StatusOr<std::unique_ptr<BertModel>> model =
          BertModel::Create(config, std::move(checkpoint), options);
      if (!model.ok()) return model.status();
      return std::unique_ptr<Model>(*std::move(model));
    });

}  // namespace

}  // namespace castserve::models
