#include "models/kernels/onednn_ops.h"

namespace castserve::models {
namespace {

template <typename Signature>
const c10::TypedOperatorHandle<Signature>* FindOperator(const char* name) {
  std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle.has_value()) return nullptr;
  return new c10::TypedOperatorHandle<Signature>(handle->typed<Signature>());
}

}  // namespace

const c10::TypedOperatorHandle<OneDnnLinearPointwise>* OneDnnLinear() {
  static const auto* const op =
      FindOperator<OneDnnLinearPointwise>("mkldnn::_linear_pointwise");
  return op;
}

const c10::TypedOperatorHandle<OneDnnReorderLinearWeight>* OneDnnReorder() {
  static const auto* const op =
      FindOperator<OneDnnReorderLinearWeight>("mkldnn::_reorder_linear_weight");
  return op;
}

std::optional<OneDnnPostOp> OneDnnPostOpOf(
    std::optional<Activation> activation) {
  if (!activation.has_value()) return kNoOneDnnPostOp;
  switch (*activation) {
    case Activation::kGelu:
      return OneDnnPostOp{"gelu", "none"};
    case Activation::kGeluTanh:
      return OneDnnPostOp{"gelu", "tanh"};
    case Activation::kSilu:
      return OneDnnPostOp{"swish", std::nullopt};
    case Activation::kRelu:
      return OneDnnPostOp{"relu", std::nullopt};
    case Activation::kQuickGelu:
      return std::nullopt;
  }
  return std::nullopt;
}

at::Tensor OneDnnLinearProduct(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias,
                               const OneDnnPostOp& post_op) {
  std::optional<at::Tensor> b;
  if (bias.defined()) b = bias;
  // No scalars for the post-ops castserve uses; shared, not allocated per
  // call (a copy of a c10::List only counts a reference).
  static const auto* const no_scalars =
      new c10::List<std::optional<at::Scalar>>();
  return OneDnnLinear()->call(x, weight, b, post_op.attr, *no_scalars,
                              post_op.algorithm);
}

}  // namespace castserve::models
