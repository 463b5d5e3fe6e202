#include "models/kernels/matmul_kernel.h"

#include "absl/strings/str_cat.h"

namespace castserve::models {

absl::StatusOr<F32MatmulKernel> ParseF32MatmulKernel(absl::string_view name) {
  if (name == "auto") return F32MatmulKernel::kAuto;
  if (name == "blas") return F32MatmulKernel::kBlas;
  if (name == "onednn") return F32MatmulKernel::kOneDnn;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown f32 matmul kernel '", name, "'; expected auto, blas or onednn"));
}

std::string F32MatmulKernelName(F32MatmulKernel kernel) {
  switch (kernel) {
    case F32MatmulKernel::kAuto:
      return "auto";
    case F32MatmulKernel::kBlas:
      return "blas";
    case F32MatmulKernel::kOneDnn:
      return "onednn";
  }
  return "unknown";
}

}  // namespace castserve::models
