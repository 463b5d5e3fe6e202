// device_codec_backend.h for the CUDA build: castserve's kernels on the
// current stream of the tensors' device. LibTorch's device-generic guard
// hands over the cudaStream_t, so no CUDA header is needed here.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "absl/strings/str_cat.h"
#include "casting/codec/codec_cuda.h"
#include "casting/device/device_codec_backend.h"

namespace castserve::casting::internal {

absl::Status CudaDecodeTensor(StorageFormat format, const at::Tensor& src,
                              const at::Tensor& scales, int64_t num_rows,
                              ElementType dst_type, at::Tensor& dst) {
  const c10::DeviceGuard device_guard(dst.device());
  const c10::impl::VirtualGuardImpl cuda(dst.device().type());
  void* stream = cuda.getStreamNativeHandle(cuda.getStream(dst.device()));
  const int error =
      CudaDecode(format, src.data_ptr(),
                 scales.defined() ? scales.data_ptr<float>() : nullptr,
                 dst.numel(), num_rows, dst_type, dst.data_ptr(), stream);
  if (error == kCudaCodecOk) return absl::OkStatus();
  const std::string message =
      absl::StrCat("CUDA decode of ", format.ToString(), " on ",
                   dst.device().str(), ": ", CudaCodecErrorName(error));
  return error == kCudaCodecInvalidArgument
             ? absl::InvalidArgumentError(message)
             : absl::InternalError(message);
}

}  // namespace castserve::casting::internal
