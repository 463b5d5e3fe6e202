#include "models/layers/activation.h"

#include <ATen/ATen.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace castserve::models {

absl::StatusOr<Activation> ParseActivation(absl::string_view hf_name) {
  const std::string name = absl::AsciiStrToLower(hf_name);
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" ||
      name == "gelu_fast") {
    return Activation::kGeluTanh;
  }
  if (name == "quick_gelu") return Activation::kQuickGelu;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "relu") return Activation::kRelu;
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported activation '", std::string(hf_name),
      "'; supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, "
      "quick_gelu, silu, swish, relu"));
}

at::Tensor Activate(Activation activation, const at::Tensor& x) {
  switch (activation) {
    case Activation::kGelu:
      return at::gelu(x);
    case Activation::kGeluTanh:
      return at::gelu(x, "tanh");
    case Activation::kQuickGelu:
      return x * at::sigmoid(x * 1.702);
    case Activation::kSilu:
      return at::silu(x);
    case Activation::kRelu:
      return at::relu(x);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown activation");
}

}  // namespace castserve::models
