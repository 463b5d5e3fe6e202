#include "models/decoder/gated_mlp.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace castserve::models {

GatedMlp::GatedMlp(const std::string& name, const DecoderSpec& spec)
    : Module(name, spec.class_prefix + "MLP"),
      activation_(spec.mlp_activation),
      inner_(spec.intermediate_size) {}

absl::StatusOr<std::unique_ptr<GatedMlp>> GatedMlp::Create(
    const std::string& name, const DecoderSpec& spec,
    const WeightFactory& weights) {
  auto mlp = std::unique_ptr<GatedMlp>(new GatedMlp(name, spec));
  const int64_t hidden = spec.hidden_size, inner = spec.intermediate_size;
  const DecoderTensorNames& names = spec.names;
  struct Projection {
    const std::string* local;
    int64_t in, out;
    Linear** slot;
  };
  std::vector<Projection> projections;
  if (!names.gate_up.empty()) {
    projections.push_back({&names.gate_up, hidden, 2 * inner, &mlp->gate_up_});
  } else {
    projections.push_back({&names.gate, hidden, inner, &mlp->gate_});
    projections.push_back({&names.up, hidden, inner, &mlp->up_});
  }
  projections.push_back({&names.down, inner, hidden, &mlp->down_});
  for (const Projection& p : projections) {
    absl::StatusOr<std::unique_ptr<Linear>> linear = Linear::Create(
        absl::StrCat(name, ".", *p.local), weights, p.in, p.out, spec.mlp_bias);
    if (!linear.ok()) return linear.status();
    *p.slot = mlp->AddChild(*std::move(linear));
  }
  return mlp;
}

at::Tensor GatedMlp::Forward(ForwardContext& ctx, const at::Tensor& x) const {
  ModuleCall call(*this, ctx);
  if (gate_up_ != nullptr) {
    at::Tensor gate_up = gate_up_->Forward(ctx, x);
    at::Tensor gated = Activate(activation_, gate_up.narrow(-1, 0, inner_)) *
                       gate_up.narrow(-1, inner_, inner_);
    return down_->Forward(ctx, gated);
  }
  at::Tensor gated = gate_->ForwardActivated(ctx, x, activation_);
  return down_->Forward(ctx, gated * up_->Forward(ctx, x));
}

}  // namespace castserve::models
