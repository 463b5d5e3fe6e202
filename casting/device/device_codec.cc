#include "casting/device/device_codec.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "casting/device/device_codec_backend.h"
#include "casting/device/torch_types.h"

namespace castserve::casting {

absl::Status DecodeTensor(StorageFormat format, const at::Tensor& src,
                          const at::Tensor& scales, int64_t num_rows,
                          ElementType dst_type, at::Tensor& dst,
                          const CodecOptions& codec) {
  TORCH_INTERNAL_ASSERT(src.is_contiguous() && dst.is_contiguous());
  TORCH_INTERNAL_ASSERT(src.device() == dst.device());
  TORCH_INTERNAL_ASSERT(!scales.defined() || scales.device() == dst.device());
  TORCH_INTERNAL_ASSERT(dst.scalar_type() == TorchScalarType(dst_type));
  if (dst.is_cuda()) {
    return internal::CudaDecodeTensor(format, src, scales, num_rows, dst_type,
                                      dst);
  }
  return Decode(format, src.data_ptr(),
                scales.defined() ? scales.data_ptr<float>() : nullptr,
                dst.numel(), num_rows, dst_type, dst.data_ptr(), codec);
}

at::Tensor EmptyOn(const Device& device, at::ScalarType dtype,
                   at::IntArrayRef shape) {
  return at::empty(
      shape, at::TensorOptions().dtype(dtype).device(TorchDevice(device)));
}

at::Tensor HostStaging(const Device& device, at::ScalarType dtype,
                       at::IntArrayRef shape) {
  return at::empty(
      shape, at::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda()));
}

at::Tensor ToDevice(const at::Tensor& tensor, const Device& device) {
  const c10::Device target = TorchDevice(device);
  if (tensor.device() == target) return tensor;
  return tensor.to(target, /*non_blocking=*/tensor.is_pinned());
}

void SynchronizeCurrentStream(const Device& device) {
  if (device.is_cpu()) return;
  const c10::Device torch_device = TorchDevice(device);
  const c10::impl::VirtualGuardImpl guard(torch_device.type());
  guard.synchronizeStream(guard.getStream(torch_device));
}

void RecordOnCurrentStream(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.is_cpu()) return;
  const c10::impl::VirtualGuardImpl guard(tensor.device().type());
  guard.recordDataPtrOnStream(tensor.storage().data_ptr(),
                              guard.getStream(tensor.device()));
}

}  // namespace castserve::casting
