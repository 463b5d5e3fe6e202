#include "models/kernels/packed_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string_view>

namespace castserve::models {
namespace {

// mkldnn::_reorder_linear_weight(Tensor self, int? batch_size=None) -> Tensor:
// the weight in the layout oneDNN's matmul picks for it (batch_size is a
// hint; without one the layout serves every row count).
using ReorderLinearWeight = at::Tensor(const at::Tensor&,
                                       std::optional<int64_t>);
// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr,
// Scalar?[] scalars, str? algorithm) -> Tensor, with W plain or packed.
using LinearPointwise = at::Tensor(const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&,
                                   std::string_view,
                                   c10::List<std::optional<at::Scalar>>,
                                   std::optional<std::string_view>);

template <typename Signature>
const c10::TypedOperatorHandle<Signature>* FindOperator(const char* name) {
  std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle.has_value()) return nullptr;
  return new c10::TypedOperatorHandle<Signature>(handle->typed<Signature>());
}

const c10::TypedOperatorHandle<ReorderLinearWeight>* Reorder() {
  static const auto* const op =
      FindOperator<ReorderLinearWeight>("mkldnn::_reorder_linear_weight");
  return op;
}

const c10::TypedOperatorHandle<LinearPointwise>* Pointwise() {
  static const auto* const op =
      FindOperator<LinearPointwise>("mkldnn::_linear_pointwise");
  return op;
}

// oneDNN's post-op (attr, algorithm) for `activation`; nullopt for one it
// lacks (quick GELU).
struct PostOp {
  std::string_view attr;
  std::optional<std::string_view> algorithm;
};

std::optional<PostOp> PostOpOf(std::optional<Activation> activation) {
  if (!activation.has_value()) return PostOp{"none", std::nullopt};
  switch (*activation) {
    case Activation::kGelu:
      return PostOp{"gelu", "none"};
    case Activation::kGeluTanh:
      return PostOp{"gelu", "tanh"};
    case Activation::kSilu:
      return PostOp{"swish", std::nullopt};
    case Activation::kRelu:
      return PostOp{"relu", std::nullopt};
    case Activation::kQuickGelu:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

bool PackedLinear::Available() {
  return Reorder() != nullptr && Pointwise() != nullptr;
}

PackedLinear PackedLinear::Pack(const at::Tensor& weight,
                                const at::Tensor& bias) {
  TORCH_CHECK(Available(), "PackedLinear: this LibTorch has no oneDNN");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat &&
                  weight.device().is_cpu(),
              "PackedLinear: weight must be a 2-D f32 CPU tensor, got ",
              weight.scalar_type(), " ", weight.sizes(), " on ",
              weight.device());
  TORCH_CHECK(!bias.defined() ||
                  (bias.scalar_type() == at::kFloat && bias.device().is_cpu() &&
                   bias.numel() == weight.size(0)),
              "PackedLinear: bias must be f32 [", weight.size(0),
              "] on the CPU");
  PackedLinear packed;
  packed.packed_ = Reorder()->call(weight.contiguous(), std::nullopt);
  if (bias.defined()) packed.bias_ = bias.contiguous();
  packed.out_features_ = weight.size(0);
  packed.in_features_ = weight.size(1);
  return packed;
}

at::Tensor PackedLinear::Apply(const at::Tensor& x,
                               std::optional<Activation> activation) const {
  TORCH_INTERNAL_ASSERT(packed_.defined(), "PackedLinear used before Pack");
  std::optional<at::Tensor> bias;
  if (bias_.defined()) bias = bias_;
  const std::optional<PostOp> post_op = PostOpOf(activation);
  // Shared, not allocated per call (a copy of a c10::List only counts a
  // reference).
  static const auto* const no_scalars =
      new c10::List<std::optional<at::Scalar>>();
  at::Tensor y = Pointwise()->call(
      x.contiguous(), packed_, bias,
      post_op.has_value() ? post_op->attr : "none", *no_scalars,
      post_op.has_value() ? post_op->algorithm : std::nullopt);
  if (!post_op.has_value()) y = Activate(*activation, y);
  return y;
}

}  // namespace castserve::models
