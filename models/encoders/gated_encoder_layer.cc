#include "models/encoders/gated_encoder_layer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/layers/attention.h"
#include "models/layers/rotary.h"

namespace castserve::models {
namespace {

// "layers.0.attn" for "layers.0.attn.Wqkv": the module holding a block's
// projections, as the checkpoint nests them.
std::string Holder(const std::string& projection) {
  const size_t dot = projection.rfind('.');
  return dot == std::string::npos ? projection : projection.substr(0, dot);
}

}  // namespace

// Self-attention with rotary queries and keys over one fused or three
// projections.
class GatedAttention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<GatedAttention>> Create(
      const std::string& layer, const EncoderSpec& spec,
      const WeightFactory& weights) {
    const GatedLayerNames& names = spec.names.gated;
    const std::string prefix = layer + ".";
    std::unique_ptr<GatedAttention> a(new GatedAttention(
        prefix + Holder(names.attention_out), spec.class_prefix + "Attention",
        spec.num_attention_heads));
    const int64_t hidden = spec.hidden_size;
    const bool bias = spec.attention_bias;
    absl::Status status = absl::OkStatus();
    if (!names.qkv.empty()) {
      status = Adopt(
          *a,
          Linear::Create(prefix + names.qkv, weights, hidden, 3 * hidden, bias),
          &a->qkv_);
    }
    for (auto [local, slot] :
         {std::pair{&names.q, &a->q_}, std::pair{&names.k, &a->k_},
          std::pair{&names.v, &a->v_}}) {
      if (status.ok() && !local->empty()) {
        status = Adopt(
            *a, Linear::Create(prefix + *local, weights, hidden, hidden, bias),
            slot);
      }
    }
    if (status.ok()) {
      status = Adopt(*a,
                     Linear::Create(prefix + names.attention_out, weights,
                                    hidden, hidden, bias),
                     &a->out_);
    }
    if (!status.ok()) return status;
    return a;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& bias, const RopeTables& rope) const {
    ModuleCall call(*this, context);
    std::vector<at::Tensor> qkv;
    if (qkv_ != nullptr) {
      qkv = qkv_->Forward(context, x).chunk(3, -1);
    } else {
      qkv = {q_->Forward(context, x), k_->Forward(context, x),
             v_->Forward(context, x)};
    }
    at::Tensor q = ApplyRotary(SplitHeads(qkv[0], heads_), rope);
    at::Tensor k = ApplyRotary(SplitHeads(qkv[1], heads_), rope);
    at::Tensor v = SplitHeads(qkv[2], heads_);
    const double scale = 1 / std::sqrt(static_cast<double>(q.size(-1)));
    return out_->Forward(
        context, MergeHeads(ScaledDotProductAttention(q, k, v, bias, scale)));
  }

 private:
  GatedAttention(std::string name, std::string kind, int64_t heads)
      : Module(std::move(name), std::move(kind)), heads_(heads) {}
  const int64_t heads_;
  Linear* qkv_ = nullptr;  // Or q_, k_, v_.
  Linear* q_ = nullptr;
  Linear* k_ = nullptr;
  Linear* v_ = nullptr;
  Linear* out_ = nullptr;
};

// out(act(gate(x)) * up(x)) over one fused or two projections.
class GatedMlpBlock : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<GatedMlpBlock>> Create(
      const std::string& layer, const EncoderSpec& spec,
      const WeightFactory& weights) {
    const GatedLayerNames& names = spec.names.gated;
    const std::string prefix = layer + ".";
    std::unique_ptr<GatedMlpBlock> m(new GatedMlpBlock(
        prefix + Holder(names.mlp_out), spec.class_prefix + "MLP", spec));
    const int64_t hidden = spec.hidden_size;
    const int64_t inner = spec.intermediate_size;
    const bool bias = spec.mlp_bias;
    absl::Status status = absl::OkStatus();
    if (!names.mlp_fused.empty()) {
      status = Adopt(*m,
                     Linear::Create(prefix + names.mlp_fused, weights, hidden,
                                    2 * inner, bias),
                     &m->fused_);
    } else {
      status = Adopt(
          *m,
          Linear::Create(prefix + names.mlp_gate, weights, hidden, inner, bias),
          &m->gate_);
      if (status.ok()) {
        status = Adopt(
            *m,
            Linear::Create(prefix + names.mlp_up, weights, hidden, inner, bias),
            &m->up_);
      }
    }
    if (status.ok()) {
      status = Adopt(
          *m,
          Linear::Create(prefix + names.mlp_out, weights, inner, hidden, bias),
          &m->out_);
    }
    if (!status.ok()) return status;
    return m;
  }

  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const {
    ModuleCall call(*this, context);
    at::Tensor gated;
    if (fused_ != nullptr) {
      std::vector<at::Tensor> halves = fused_->Forward(context, x).chunk(2, -1);
      gated = Activate(activation_, halves[0]) * halves[1];
    } else {
      gated = gate_->ForwardActivated(context, x, activation_) *
              up_->Forward(context, x);
    }
    return out_->Forward(context, gated);
  }

 private:
  GatedMlpBlock(std::string name, std::string kind, const EncoderSpec& spec)
      : Module(std::move(name), std::move(kind)),
        activation_(spec.activation) {}
  const Activation activation_;
  Linear* fused_ = nullptr;  // Or gate_ and up_.
  Linear* gate_ = nullptr;
  Linear* up_ = nullptr;
  Linear* out_ = nullptr;
};

GatedEncoderLayer::GatedEncoderLayer(std::string name, const EncoderSpec& spec,
                                     const EncoderLayerAttention& attention)
    : EncoderBlock(std::move(name), spec.class_prefix + "EncoderLayer"),
      norm_first_(spec.norm_first),
      attention_spec_(attention) {}

absl::StatusOr<std::unique_ptr<GatedEncoderLayer>> GatedEncoderLayer::Create(
    int64_t index, const EncoderSpec& spec, const WeightFactory& weights) {
  const std::string name = absl::StrCat(spec.names.layers, ".", index);
  std::unique_ptr<GatedEncoderLayer> l(
      new GatedEncoderLayer(name, spec, spec.layer_attention[index]));
  absl::Status status =
      Adopt(*l, GatedAttention::Create(name, spec, weights), &l->attention_);
  if (status.ok()) {
    status = Adopt(*l, GatedMlpBlock::Create(name, spec, weights), &l->mlp_);
  }
  if (status.ok()) status = l->AddNorms(spec, index, weights);
  if (!status.ok()) return status;
  return l;
}

absl::Status GatedEncoderLayer::AddNorms(const EncoderSpec& spec, int64_t index,
                                         const WeightFactory& weights) {
  const std::string prefix = name() + ".";
  const int64_t hidden = spec.hidden_size;
  absl::Status status = absl::OkStatus();
  if (index > 0 || !spec.norm_first || spec.first_layer_attention_norm) {
    status = Adopt(*this,
                   LayerNorm::Create(prefix + spec.names.gated.attention_norm,
                                     weights, hidden, spec.layer_norm_eps),
                   &attention_norm_);
  }
  if (status.ok()) {
    status = Adopt(*this,
                   LayerNorm::Create(prefix + spec.names.gated.mlp_norm,
                                     weights, hidden, spec.layer_norm_eps),
                   &mlp_norm_);
  }
  return status;
}

at::Tensor GatedEncoderLayer::Forward(ForwardContext& context,
                                      const at::Tensor& x,
                                      const EncoderStep& step) const {
  ModuleCall call(*this, context);
  const at::Tensor& bias = step.biases.at(attention_spec_.window);
  const RopeTables& rope = step.ropes[attention_spec_.rope];
  if (norm_first_) {
    at::Tensor normed =
        attention_norm_ != nullptr ? attention_norm_->Forward(context, x) : x;
    at::Tensor h = x + attention_->Forward(context, normed, bias, rope);
    return h + mlp_->Forward(context, mlp_norm_->Forward(context, h));
  }
  at::Tensor h = attention_norm_->Forward(
      context, x + attention_->Forward(context, x, bias, rope));
  return mlp_norm_->Forward(context, h + mlp_->Forward(context, h));
}

}  // namespace castserve::models
