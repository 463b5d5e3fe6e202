// The device seam of the weight lifecycle: the one place that decodes stored
// bytes into a compute tensor on a device, and moves tensors between host
// and device. Weight (casting/weight.h) calls these and nothing
// device-specific, so a device is a branch here, not in every caller.
//
// Streams: on CUDA every call enqueues its work on the current stream of the
// tensor's device (c10::cuda::getCurrentCUDAStream, which a caller may set
// with a c10::StreamGuard, as casting/device/side_stream.h does for prefetch)
// and returns without synchronizing; results are ready in that stream's order.
// Memory comes from LibTorch's allocators: the CUDA caching allocator for
// device tensors, the pinned host allocator for staging. On the CPU
// everything runs to completion on the calling thread.
//
// In a build without CUDA (the default) a CUDA tensor cannot exist: the
// CUDA branches return FailedPrecondition "built without CUDA" rather than
// linking the CUDA runtime (device_codec_none.cc; --config=cuda links
// device_codec_cuda.cc and castserve's CUDA kernels, codec_cuda.h).
//
// Thread-safe.
#ifndef CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_H_
#define CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/status.h"
#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "casting/device/device.h"

namespace castserve::casting {

// Decodes `src` (contiguous, `format`'s bytes or elements, `num_rows` rows)
// and, for scaled formats, `scales` (contiguous f32) into `dst` (contiguous,
// of `dst_type`'s LibTorch dtype, as many elements as `src` holds). All on
// one device: on the CPU with the CPU codec and `codec`'s ISA choice, on
// CUDA with castserve's CUDA kernels (bit-identical to the CPU reference) on
// the current stream. The same errors as Decode() in codec.h.
absl::Status DecodeTensor(StorageFormat format, const at::Tensor& src,
                          const at::Tensor& scales, int64_t num_rows,
                          ElementType dst_type, at::Tensor& dst,
                          const CodecOptions& codec);

// An uninitialized tensor on `device` (from the caching allocator on CUDA).
at::Tensor EmptyOn(const Device& device, at::ScalarType dtype,
                   at::IntArrayRef shape);

// An uninitialized host tensor to stage copies to `device`: pinned when
// `device` is CUDA (so that ToDevice is asynchronous), plain otherwise.
at::Tensor HostStaging(const Device& device, at::ScalarType dtype,
                       at::IntArrayRef shape);

// `tensor` on `device`: itself when it is there already; otherwise a copy
// enqueued on the current stream (asynchronous from pinned host memory; the
// pinned allocator keeps the source until the copy is done).
at::Tensor ToDevice(const at::Tensor& tensor, const Device& device);

// Blocks the calling thread until the work enqueued so far on the current
// stream of `device` is done. No-op on the CPU.
void SynchronizeCurrentStream(const Device& device);

// Declares that `tensor` is used on the current stream of its device, so
// that the caching allocator does not reuse its memory before that stream's
// work is done, even if the tensor was made on another stream (a prefetch's
// side stream) and is freed from there. No-op on the CPU.
void RecordOnCurrentStream(const at::Tensor& tensor);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_DEVICE_DEVICE_CODEC_H_
