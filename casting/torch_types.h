// LibTorch's view of the dtype table (casting/dtype_table.h): the table's
// torch_name column resolved to c10::ScalarType. This is the one place that
// translates between castserve's dtypes and LibTorch's; it resolves the
// names once, at first use, and aborts there if a name in the table is not
// a LibTorch dtype (a broken table, caught by torch_types_test).
//
// Thread-safe.
#ifndef CASTSERVE_CASTING_TORCH_TYPES_H_
#define CASTSERVE_CASTING_TORCH_TYPES_H_

#include <c10/core/ScalarType.h>

#include <optional>

#include "casting/dtype_table.h"

namespace castserve::casting {

// The LibTorch type that holds elements of `type`. fp8 elements live in
// uint8 tensors (castserve's codec reads and writes them).
c10::ScalarType TorchScalarType(ElementType type);

// The LibTorch type of `dtype`'s tensors; nullopt when castserve has no
// LibTorch type for it (UINT16/32/64, complex, sub-byte floats, BYTES).
std::optional<c10::ScalarType> TorchScalarType(DType dtype);

// The row whose elements LibTorch's `type` is (not merely holds the bytes
// of, as kByte holds fp8); nullptr when no row is.
const DtypeRow* FindByTorchScalarType(c10::ScalarType type);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_TORCH_TYPES_H_
