// CUDA codec: the conversions of codec.h on device buffers.
//
// Plain C++: including this header needs no CUDA headers. Pointers named
// device_* are device memory owned by the caller (at least num_elements
// elements, plus the scales of scaled formats, as for the CPU codec);
// `stream` is a cudaStream_t passed as void* (nullptr = default stream).
// Calls only enqueue work: results are ready after the stream synchronizes.
// Results are bit-identical to the CPU reference (same rounding, NaN,
// saturation and scaling rules; see codec.h). Thread-safe.
//
// Functions return 0 on success or one of CudaCodecError.
#ifndef CASTSERVE_CASTING_CODEC_CODEC_CUDA_H_
#define CASTSERVE_CASTING_CODEC_CODEC_CUDA_H_

#include <cstdint>

#include "casting/codec/storage_format.h"

namespace castserve::casting {

enum CudaCodecError : int {
  kCudaCodecOk = 0,
  kCudaCodecInvalidArgument = 1,  // Bad type, sizes, null pointer.
  kCudaCodecCudaError = 2,        // The CUDA runtime reported an error.
};

const char* CudaCodecErrorName(int error);

// Number of visible CUDA devices; 0 when there is no driver or device.
int CudaDeviceCount();

// As Encode() in codec.h. Scaled formats also write the scales to
// `device_scales` (device memory); they are computed on the device.
// Per-block formats are refused (kCudaCodecInvalidArgument): their storage
// comes from pre-quantized checkpoints, encoded by the host codec if at all.
int CudaEncode(ElementType src_type, const void* device_src,
               int64_t num_elements, int64_t num_rows, StorageFormat format,
               void* device_dst, float* device_scales, void* stream);

// As Decode() in codec.h; `device_scales` is device memory.
int CudaDecode(StorageFormat format, const void* device_src,
               const float* device_scales, int64_t num_elements,
               int64_t num_rows, ElementType dst_type, void* device_dst,
               void* stream);

// The device's per-element conversions, compiled for and run on the host
// (same source), so that tests can check them without a GPU.
float CudaDecodeElementOnHost(ElementType type, uint32_t bits);
uint32_t CudaEncodeElementOnHost(ElementType type, float value);

// Minimal memory helpers for tests and tools that have no CUDA headers.
int CudaAllocate(int64_t bytes, void** device_ptr);
int CudaRelease(void* device_ptr);
int CudaCopyToDevice(void* device_dst, const void* host_src, int64_t bytes);
int CudaCopyToHost(void* host_dst, const void* device_src, int64_t bytes);
int CudaSynchronize(void* stream);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_CODEC_CODEC_CUDA_H_
