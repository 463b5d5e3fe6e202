// device_codec_backend.h for the build without CUDA.
#include "casting/device/device_codec_backend.h"

namespace castserve::casting::internal {

absl::Status CudaDecodeTensor(StorageFormat format, const at::Tensor& src,
                              const at::Tensor& scales, int64_t num_rows,
                              ElementType dst_type, at::Tensor& dst) {
  return absl::FailedPreconditionError(
      "a CUDA decode in a castserve built without CUDA: bazel build "
      "--config=cuda");
}

}  // namespace castserve::casting::internal
