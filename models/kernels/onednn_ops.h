// LibTorch's oneDNN linear operators, looked up by name in the dispatcher
// (registered by libtorch_cpu when it is built with oneDNN, as the PyPI
// wheel is; not declared in its public headers), and the fused activations
// castserve asks them for. Used by matmul.h (the f32 product) and
// packed_linear.h (products over pre-packed weights).
#ifndef CASTSERVE_MODELS_KERNELS_ONEDNN_OPS_H_
#define CASTSERVE_MODELS_KERNELS_ONEDNN_OPS_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>

#include "models/layers/activation.h"

namespace castserve::models {

// mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr,
// Scalar?[] scalars, str? algorithm) -> Tensor: oneDNN's matmul with a
// fused post-op, W plain or packed by OneDnnReorderLinearWeight.
using OneDnnLinearPointwise = at::Tensor(const at::Tensor&, const at::Tensor&,
                                         const std::optional<at::Tensor>&,
                                         std::string_view,
                                         c10::List<std::optional<at::Scalar>>,
                                         std::optional<std::string_view>);
// mkldnn::_reorder_linear_weight(Tensor self, int? batch_size=None) ->
// Tensor: the weight in the layout oneDNN's matmul picks for it (batch_size
// is a hint; without one the layout serves every row count).
using OneDnnReorderLinearWeight = at::Tensor(const at::Tensor&,
                                             std::optional<int64_t>);

// The operators, or null when this LibTorch lacks them. Looked up once.
const c10::TypedOperatorHandle<OneDnnLinearPointwise>* OneDnnLinear();
const c10::TypedOperatorHandle<OneDnnReorderLinearWeight>* OneDnnReorder();

// A post-op as _linear_pointwise's (attr, algorithm) arguments.
struct OneDnnPostOp {
  std::string_view attr;
  std::optional<std::string_view> algorithm;
};
inline constexpr OneDnnPostOp kNoOneDnnPostOp{"none", std::nullopt};

// The post-op computing `activation` (none: kNoOneDnnPostOp); nullopt for
// an activation oneDNN has no post-op for (quick GELU): apply it after.
std::optional<OneDnnPostOp> OneDnnPostOpOf(
    std::optional<Activation> activation);

// _linear_pointwise(x, weight, bias, post_op) with no scalars.
at::Tensor OneDnnLinearProduct(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias,
                               const OneDnnPostOp& post_op);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_ONEDNN_OPS_H_
