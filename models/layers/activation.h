// The activations of castserve's architectures, by their Hugging Face
// names. Layers apply them after a Linear (Linear::ForwardActivated fuses
// them into the product where the kernel can, models/kernels/matmul.h).
#ifndef CASTSERVE_MODELS_LAYERS_ACTIVATION_H_
#define CASTSERVE_MODELS_LAYERS_ACTIVATION_H_

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::models {

// Activations by their Hugging Face names: "gelu" (erf), "gelu_new" /
// "gelu_pytorch_tanh" / "gelu_fast" (tanh approximation), "quick_gelu"
// (x * sigmoid(1.702 x)), "silu" / "swish", "relu" (case-insensitive).
// InvalidArgument listing the supported names otherwise.
enum class Activation { kGelu, kGeluTanh, kQuickGelu, kSilu, kRelu };
absl::StatusOr<Activation> ParseActivation(absl::string_view hf_name);
at::Tensor Activate(Activation activation, const at::Tensor& x);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LAYERS_ACTIVATION_H_
