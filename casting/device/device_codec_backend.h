// The CUDA half of device_codec.h, one of two implementations chosen by the
// build: device_codec_cuda.cc (--config=cuda) or device_codec_none.cc.
// Internal to //casting/device:device_codec.
#ifndef CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_BACKEND_H_
#define CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_BACKEND_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/status.h"
#include "casting/codec/storage_format.h"

namespace castserve::casting::internal {

// DecodeTensor for tensors on one CUDA device: CudaDecode on that device's
// current stream. Arguments are checked by the caller.
absl::Status CudaDecodeTensor(StorageFormat format, const at::Tensor& src,
                              const at::Tensor& scales, int64_t num_rows,
                              ElementType dst_type, at::Tensor& dst);

}  // namespace castserve::casting::internal

#endif  // CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_BACKEND_H_
