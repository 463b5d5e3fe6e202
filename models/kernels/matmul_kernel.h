// The names of the CPU kernels f32 layer products can run on
// (models/kernels/matmul.h), LibTorch-free so that flag parsing can use them.
#ifndef CASTSERVE_MODELS_KERNELS_MATMUL_KERNEL_H_
#define CASTSERVE_MODELS_KERNELS_MATMUL_KERNEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::models {

enum class F32MatmulKernel {
  kAuto,    // Measure both at first use and take the faster.
  kBlas,    // at::linear: LibTorch's BLAS (MKL).
  kOneDnn,  // oneDNN's matmul (mkldnn::_linear_pointwise), plain weights.
};

// "auto", "blas" or "onednn"; InvalidArgument otherwise, listing them.
absl::StatusOr<F32MatmulKernel> ParseF32MatmulKernel(absl::string_view name);
std::string F32MatmulKernelName(F32MatmulKernel kernel);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_MATMUL_KERNEL_H_
