#include "models/encoders/encoder_blocks.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "models/layers/attention.h"

namespace castserve::models {

EncoderEmbeddings::EncoderEmbeddings(const EncoderSpec& spec)
    : Module("embeddings", spec.class_prefix + "Embeddings"), spec_(spec) {}

absl::StatusOr<std::unique_ptr<EncoderEmbeddings>> EncoderEmbeddings::Create(
    const EncoderSpec& spec, const WeightFactory& weights) {
  std::unique_ptr<EncoderEmbeddings> e(new EncoderEmbeddings(spec));
  const int64_t hidden = spec.hidden_size;
  absl::Status status =
      Adopt(*e,
            Embedding::Create(spec.names.word_embeddings, weights,
                              spec.vocab_size, hidden),
            &e->word_);
  if (status.ok() && spec.positions != EncoderPositions::kRotary) {
    status = Adopt(*e,
                   Embedding::Create(spec.names.position_embeddings, weights,
                                     spec.max_position_embeddings, hidden),
                   &e->position_);
  }
  if (status.ok() && !spec.names.token_type_embeddings.empty()) {
    status = Adopt(*e,
                   Embedding::Create(spec.names.token_type_embeddings, weights,
                                     spec.type_vocab_size, hidden),
                   &e->token_type_);
  }
  if (status.ok()) {
    status = Adopt(*e,
                   LayerNorm::Create(spec.names.embeddings_norm, weights,
                                     hidden, spec.layer_norm_eps),
                   &e->norm_);
  }
  if (!status.ok()) return status;
  return e;
}

at::Tensor EncoderEmbeddings::PositionIds(const EncoderSpec& spec,
                                          const at::Tensor& ids) {
  if (spec.positions != EncoderPositions::kAfterPadding) {
    return at::arange(ids.size(1), ids.options()).unsqueeze(0);
  }
  // transformers' create_position_ids_from_input_ids.
  at::Tensor real = ids.ne(spec.padding_idx).to(at::kLong);
  return at::cumsum(real, 1) * real + spec.padding_idx;
}

at::Tensor EncoderEmbeddings::Forward(ForwardContext& context,
                                      const at::Tensor& ids,
                                      const at::Tensor& token_types) const {
  ModuleCall call(*this, context);
  at::Tensor sum = word_->Forward(context, ids);
  if (token_type_ != nullptr) {
    sum = sum + token_type_->Forward(context, token_types);
  }
  if (position_ != nullptr) {
    sum = sum + position_->Forward(context, PositionIds(spec_, ids));
  }
  return norm_->Forward(context, sum);
}

class EncoderSelfAttention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<EncoderSelfAttention>> Create(
      const std::string& name, const EncoderSpec& spec,
      const WeightFactory& weights) {
    std::unique_ptr<EncoderSelfAttention> a(new EncoderSelfAttention(
        name, spec.class_prefix + "SelfAttention", spec.num_attention_heads));
    const int64_t hidden = spec.hidden_size;
    absl::Status status = absl::OkStatus();
    for (auto [local, slot] :
         {std::pair{".query", &a->query_}, std::pair{".key", &a->key_},
          std::pair{".value", &a->value_}}) {
      if (status.ok()) {
        status = Adopt(
            *a, Linear::Create(name + local, weights, hidden, hidden, true),
            slot);
      }
    }
    if (!status.ok()) return status;
    return a;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& additive_mask) const {
    ModuleCall call(*this, context);
    const int64_t head_dim = x.size(2) / heads_;
    at::Tensor q = SplitHeads(query_->Forward(context, x), heads_);
    at::Tensor k = SplitHeads(key_->Forward(context, x), heads_);
    at::Tensor v = SplitHeads(value_->Forward(context, x), heads_);
    const double scale = 1 / std::sqrt(static_cast<double>(head_dim));
    return MergeHeads(ScaledDotProductAttention(q, k, v, additive_mask, scale));
  }

  // This forward's compute copies of the projections, into `w`.
  void CollectWeights(ForwardContext& context,
                      PackedBertLayer::Weights& w) const {
    w.query_weight = query_->Param(context, "weight");
    w.query_bias = query_->OptionalParam(context, "bias");
    w.key_weight = key_->Param(context, "weight");
    w.key_bias = key_->OptionalParam(context, "bias");
    w.value_weight = value_->Param(context, "weight");
    w.value_bias = value_->OptionalParam(context, "bias");
  }

  // True for the query, key and value projections (whose biases the packed
  // layer concatenates).
  bool IsProjection(const Module* module) const {
    return module == query_ || module == key_ || module == value_;
  }

 private:
  EncoderSelfAttention(std::string name, std::string kind, int64_t heads)
      : Module(std::move(name), std::move(kind)), heads_(heads) {}
  const int64_t heads_;
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
      const EncoderSpec& spec, const WeightFactory& weights) {
    std::unique_ptr<DenseAddNorm> m(new DenseAddNorm(name, kind));
    absl::Status status =
        Adopt(*m,
              Linear::Create(name + ".dense", weights, in_features,
                             spec.hidden_size, true),
              &m->dense_);
    if (status.ok()) {
      status = Adopt(*m,
                     LayerNorm::Create(name + ".LayerNorm", weights,
                                       spec.hidden_size, spec.layer_norm_eps),
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

  // This forward's compute copies of the dense and norm weights.
  void CollectWeights(ForwardContext& context, at::Tensor& weight,
                      at::Tensor& bias, at::Tensor& norm_weight,
                      at::Tensor& norm_bias) const {
    weight = dense_->Param(context, "weight");
    bias = dense_->OptionalParam(context, "bias");
    norm_weight = norm_->Param(context, "weight");
    norm_bias = norm_->OptionalParam(context, "bias");
  }

 private:
  using Module::Module;
  Linear* dense_ = nullptr;
  LayerNorm* norm_ = nullptr;
};

EncoderLayer::EncoderLayer(std::string name, const EncoderSpec& spec)
    : EncoderBlock(std::move(name), spec.class_prefix + "Layer"),
      activation_(spec.activation),
      heads_(spec.num_attention_heads),
      layer_norm_eps_(spec.layer_norm_eps) {}

bool EncoderLayer::Packable(const WeightPolicyOptions& options) {
  return !options.casting.has_value() &&
         options.compute_dtype == casting::ElementType::kF32 &&
         options.compute_copy == casting::ComputeCopyPolicy::kCached &&
         !options.prefetch && options.device.is_cpu();
}

absl::StatusOr<std::unique_ptr<EncoderLayer>> EncoderLayer::Create(
    const std::string& name, const EncoderSpec& spec,
    const WeightFactory& weights) {
  std::unique_ptr<EncoderLayer> l(new EncoderLayer(name, spec));
  l->packable_ = Packable(weights.options()) && PackedLinear::Available();
  const std::string& prefix = spec.class_prefix;
  Module* attention = l->AddChild(
      std::make_unique<Module>(name + ".attention", prefix + "Attention"));
  Module* intermediate = l->AddChild(std::make_unique<Module>(
      name + ".intermediate", prefix + "Intermediate"));
  absl::Status status = Adopt(
      *attention,
      EncoderSelfAttention::Create(name + ".attention.self", spec, weights),
      &l->self_attention_);
  if (status.ok()) {
    status = Adopt(
        *attention,
        DenseAddNorm::Create(name + ".attention.output", prefix + "SelfOutput",
                             spec.hidden_size, spec, weights),
        &l->attention_output_);
  }
  if (status.ok()) {
    status =
        Adopt(*intermediate,
              Linear::Create(name + ".intermediate.dense", weights,
                             spec.hidden_size, spec.intermediate_size, true),
              &l->intermediate_);
  }
  if (status.ok()) {
    status = Adopt(*l,
                   DenseAddNorm::Create(name + ".output", prefix + "Output",
                                        spec.intermediate_size, spec, weights),
                   &l->output_);
  }
  if (!status.ok()) return status;
  l->Visit([&](Module& module) {
    if (&module != l.get()) l->descendants_.push_back(&module);
  });
  return l;
}

bool EncoderLayer::DescendantsHaveHooks() const {
  for (const Module* module : descendants_) {
    if (module->has_hooks()) return true;
  }
  return false;
}

at::Tensor EncoderLayer::Forward(ForwardContext& context, const at::Tensor& x,
                                 const EncoderStep& step) const {
  ModuleCall call(*this, context);
  const at::Tensor& additive_mask = step.biases.at(0);
  if (packable_ && PackedEncoderLayersEnabled() && !DescendantsHaveHooks()) {
    return Packed(context)->Forward(x, additive_mask);
  }
  at::Tensor attended = attention_output_->Forward(
      context, self_attention_->Forward(context, x, additive_mask), x);
  at::Tensor inner =
      intermediate_->ForwardActivated(context, attended, activation_);
  return output_->Forward(context, inner, attended);
}

std::shared_ptr<const PackedBertLayer> EncoderLayer::Packed(
    ForwardContext& context) const {
  // Concurrent first forwards wait for the one that packs. One that throws
  // (a weight that cannot be read) leaves none: the next one tries again.
  absl::MutexLock lock(&packed_mu_);
  if (packed_ != nullptr) return packed_;
  PackedBertLayer::Weights w;
  self_attention_->CollectWeights(context, w);
  attention_output_->CollectWeights(
      context, w.attention_output_weight, w.attention_output_bias,
      w.attention_norm_weight, w.attention_norm_bias);
  w.intermediate_weight = intermediate_->Param(context, "weight");
  w.intermediate_bias = intermediate_->OptionalParam(context, "bias");
  output_->CollectWeights(context, w.output_weight, w.output_bias,
                          w.output_norm_weight, w.output_norm_bias);
  PackedBertLayer::Options options;
  options.heads = heads_;
  options.layer_norm_eps = layer_norm_eps_;
  options.activation = activation_;
  packed_ = std::make_shared<const PackedBertLayer>(w, options);
  packed_bytes_.store(packed_->packed_bytes());
  return packed_;
}

int64_t EncoderLayer::ConfiguredDerivedBytes() const {
  if (!packable_ || !PackedEncoderLayersEnabled()) return 0;
  // Every product inside the layer is packed (PackedBertLayer): query, key,
  // value, the attention output, intermediate and output denses; the first
  // three's biases are concatenated, and the LayerNorms' parameters copied.
  const auto f32_bytes = [](const casting::Weight& weight) {
    int64_t elements = 1;
    for (int64_t size : weight.shape()) elements *= size;
    return elements * static_cast<int64_t>(sizeof(float));
  };
  int64_t bytes = 0;
  for (const Module* module : descendants_) {
    if (module->kind() == "LayerNorm") {
      for (const auto& [name, weight] : module->weights()) {
        bytes += f32_bytes(*weight);
      }
    } else if (module->kind() == "Linear") {
      bytes += f32_bytes(*module->weights().at("weight"));
      const auto bias = module->weights().find("bias");
      if (self_attention_->IsProjection(module) &&
          bias != module->weights().end()) {
        bytes += f32_bytes(*bias->second);
      }
    }
  }
  return bytes;
}

void EncoderLayer::DropDerivedCopies(casting::ReleasedMemory& released) {
  absl::MutexLock lock(&packed_mu_);
  released.Add(std::shared_ptr<const void>(std::move(packed_)));
  packed_bytes_.store(0);
}

}  // namespace castserve::models
