// LibTorch's view of castserve's element types.
#ifndef CASTSERVE_CASTING_TORCH_TYPES_H_
#define CASTSERVE_CASTING_TORCH_TYPES_H_

#include <c10/core/ScalarType.h>

#include "casting/storage_format.h"

namespace castserve::casting {

// The LibTorch type that holds elements of `type`. LibTorch 1.13 has no fp8
// dtype, so fp8 elements live in uint8 tensors (castserve's codec reads them).
inline c10::ScalarType TorchScalarType(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return c10::kFloat;
    case ElementType::kF16:
      return c10::kHalf;
    case ElementType::kBF16:
      return c10::kBFloat16;
    case ElementType::kF8E4M3FN:
    case ElementType::kF8E5M2:
      return c10::kByte;
  }
  return c10::kByte;
}

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_TORCH_TYPES_H_
