// LibTorch's view of the dtype table (casting/codec/dtype_table.h): the table's
// torch_name column resolved to c10::ScalarType, and of casting::Device
// (casting/device/device.h). This is the one place that translates between
// castserve's dtypes and devices and LibTorch's; it resolves the
// names once, at first use, and aborts there if a name in the table is not
// a LibTorch dtype (a broken table, caught by torch_types_test).
//
// Thread-safe.
#ifndef CASTSERVE_CASTING_DEVICE_TORCH_TYPES_H_
#define CASTSERVE_CASTING_DEVICE_TORCH_TYPES_H_

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>

#include "absl/strings/string_view.h"
#include "casting/codec/dtype_table.h"
#include "casting/device/device.h"

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

// LibTorch's device for `device`: kCPU, or kCUDA with its index.
c10::Device TorchDevice(const Device& device);

// castserve's device for LibTorch's CPU or CUDA `device` (a CUDA device
// without an index is cuda:0); nullopt for any other device type.
std::optional<Device> DeviceOf(const c10::Device& device);

// Whether a c10::Error's message says an allocation failed: LibTorch's CPU
// allocator says "can't allocate memory" (2.x) or "not enough memory" (1.x),
// CUDA's caching allocator "out of memory".
bool IsOutOfMemoryMessage(absl::string_view message);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_DEVICE_TORCH_TYPES_H_
