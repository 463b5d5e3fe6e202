#include "models/kernels/packed_linear.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>

#include "models/kernels/onednn_ops.h"

namespace castserve::models {

bool PackedLinear::Available() {
  return OneDnnReorder() != nullptr && OneDnnLinear() != nullptr;
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
  packed.packed_ = OneDnnReorder()->call(weight.contiguous(), std::nullopt);
  if (bias.defined()) packed.bias_ = bias.contiguous();
  packed.out_features_ = weight.size(0);
  packed.in_features_ = weight.size(1);
  return packed;
}

at::Tensor PackedLinear::Apply(const at::Tensor& x,
                               std::optional<Activation> activation) const {
  TORCH_INTERNAL_ASSERT(packed_.defined(), "PackedLinear used before Pack");
  const std::optional<OneDnnPostOp> post_op = OneDnnPostOpOf(activation);
  at::Tensor y = OneDnnLinearProduct(x.contiguous(), packed_, bias_,
                                     post_op.value_or(kNoOneDnnPostOp));
  if (!post_op.has_value()) y = Activate(*activation, y);
  return y;
}

}  // namespace castserve::models
