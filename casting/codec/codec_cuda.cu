// CUDA kernels for the codec. Each element goes source -> exact f32 ->
// (scale) -> destination with the same integer rounding as the CPU kernels,
// so results match the CPU reference bit for bit. IEEE division and
// multiplication are used (no fast-math), as on the CPU.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec_cuda.h"

namespace castserve::casting {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kMaxBlocks = 65535;

// A binary float narrower than f32: fp8 and f16 (bf16 is a plain shift).
struct SmallFloat {
  int bits;
  int mantissa_bits;
  int exponent_bias;
  uint32_t max_magnitude;
  bool has_inf;
  bool saturates;

  __host__ __device__ constexpr uint32_t InfMagnitude() const {
    return ((1u << (bits - 1 - mantissa_bits)) - 1) << mantissa_bits;
  }
  __host__ __device__ constexpr uint32_t MaxFiniteF32Bits() const {
    return (((max_magnitude >> mantissa_bits) + 127 - exponent_bias) << 23) |
           ((max_magnitude & ((1u << mantissa_bits) - 1))
            << (23 - mantissa_bits));
  }
};

// The element conversions below are compiled for both sides: the device
// runs them in the kernels, the host runs the same code in the *OnHost
// functions so that it can be tested without a GPU.
__host__ __device__ inline uint32_t AsBits(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

__host__ __device__ inline float AsFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// Round-to-nearest arithmetic that the compiler may not fuse or reorder.
__host__ __device__ inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

__host__ __device__ inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

__host__ __device__ inline uint32_t MinU32(uint32_t a, uint32_t b) {
  return a < b ? a : b;
}

// Functions rather than constants so that device code can use them.
__host__ __device__ constexpr SmallFloat E4M3FN() {
  return {8, 3, 7, 0x7E, false, true};
}
__host__ __device__ constexpr SmallFloat E5M2() {
  return {8, 2, 15, 0x7B, true, true};
}
__host__ __device__ constexpr SmallFloat F16() {
  return {16, 10, 15, 0x7BFF, true, false};
}

__host__ __device__ float DecodeSmall(SmallFloat f, uint32_t code) {
  const int m = f.mantissa_bits;
  const uint32_t sign = ((code >> (f.bits - 1)) & 1u) << 31;
  const uint32_t magnitude = code & ((1u << (f.bits - 1)) - 1);
  uint32_t result;
  if (magnitude < (1u << m)) {  // Zero or subnormal: exact in f32.
    const float step = AsFloat(uint32_t(127 + 1 - f.exponent_bias - m) << 23);
    result = AsBits(MulRn(static_cast<float>(magnitude), step));
  } else {
    result = (magnitude << (23 - m)) + (uint32_t(127 - f.exponent_bias) << 23);
  }
  const bool is_nan =
      f.has_inf ? magnitude > f.InfMagnitude() : magnitude > f.max_magnitude;
  if (f.has_inf && magnitude == f.InfMagnitude()) result = 0x7F800000u;
  if (is_nan) {
    const uint32_t payload = f.bits == 16 ? (magnitude & 0x3FFu) << 13 : 0;
    result = 0x7FC00000u | payload;
  }
  return AsFloat(result | sign);
}

__host__ __device__ uint32_t EncodeSmall(SmallFloat f, float value) {
  const int m = f.mantissa_bits;
  const int shift = 23 - m;
  const uint32_t bits = AsBits(value);
  const uint32_t sign = (bits >> 31) << (f.bits - 1);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN.
    if (f.bits == 16) return sign | 0x7E00u | ((abs & 0x7FFFFFu) >> 13);
    return sign | (f.has_inf ? 0x7Eu : 0x7Fu);
  }
  if (abs == 0x7F800000u && f.has_inf) return sign | f.InfMagnitude();
  const uint32_t a = f.saturates ? MinU32(abs, f.MaxFiniteF32Bits()) : abs;
  uint32_t code;
  if (a < (uint32_t(127 + 1 - f.exponent_bias) << 23)) {
    const uint32_t magic = uint32_t(127 + 24 - f.exponent_bias - m) << 23;
    code = AsBits(AddRn(AsFloat(a), AsFloat(magic))) - magic;
  } else {
    const uint32_t rounded =
        a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1u);
    code = (rounded >> shift) - (uint32_t(127 - f.exponent_bias) << m);
    if (!f.saturates) code = MinU32(code, f.InfMagnitude());  // f16: to inf.
  }
  return sign | code;
}

__host__ __device__ uint32_t RoundToBf16(float value) {
  const uint32_t bits = AsBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return ((bits >> 16) & 0x8000u) | 0x7FC0u;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

// Element types by their ElementType numbers (see storage_format.h).
template <int kType>
__device__ float LoadF32(const void* src, int64_t i) {
  if constexpr (kType == 0) return static_cast<const float*>(src)[i];
  if constexpr (kType == 1) {
    return DecodeSmall(F16(), static_cast<const uint16_t*>(src)[i]);
  }
  if constexpr (kType == 2) {
    return __uint_as_float(uint32_t(static_cast<const uint16_t*>(src)[i])
                           << 16);
  }
  if constexpr (kType == 3)
    return DecodeSmall(E4M3FN(), static_cast<const uint8_t*>(src)[i]);
  if constexpr (kType == 4)
    return DecodeSmall(E5M2(), static_cast<const uint8_t*>(src)[i]);
  return 0.0f;
}

template <int kType>
__device__ void StoreF32(void* dst, int64_t i, float value) {
  if constexpr (kType == 0) static_cast<float*>(dst)[i] = value;
  if constexpr (kType == 1)
    static_cast<uint16_t*>(dst)[i] = EncodeSmall(F16(), value);
  if constexpr (kType == 2) static_cast<uint16_t*>(dst)[i] = RoundToBf16(value);
  if constexpr (kType == 3)
    static_cast<uint8_t*>(dst)[i] = EncodeSmall(E4M3FN(), value);
  if constexpr (kType == 4)
    static_cast<uint8_t*>(dst)[i] = EncodeSmall(E5M2(), value);
}

enum class ScaleOp { kNone, kMultiply, kDivide };

// scales[i / row_size] applies to element i (one row for per-tensor).
template <int kSrc, int kDst, ScaleOp kOp>
__global__ void ConvertKernel(const void* src, int64_t n, const float* scales,
                              int64_t row_size, void* dst) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float value = LoadF32<kSrc>(src, i);
    if constexpr (kOp == ScaleOp::kMultiply)
      value = __fmul_rn(value, scales[i / row_size]);
    if constexpr (kOp == ScaleOp::kDivide)
      value = __fdiv_rn(value, scales[i / row_size]);
    StoreF32<kDst>(dst, i, value);
  }
}

// Per-block decode: element i of a [n / cols, cols] tensor uses the scale of
// its block, scales[(row / block_rows) * grid_cols + col / block_cols]
// (casting/codec/storage_format.h's layout; ragged last blocks included).
struct BlockScales {
  int64_t cols, block_rows, block_cols, grid_cols;
};

template <int kSrc, int kDst>
__global__ void BlockDecodeKernel(const void* src, int64_t n,
                                  const float* scales, BlockScales grid,
                                  void* dst) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = i / grid.cols, col = i % grid.cols;
    const float scale = scales[(row / grid.block_rows) * grid.grid_cols +
                               col / grid.block_cols];
    StoreF32<kDst>(dst, i, __fmul_rn(LoadF32<kSrc>(src, i), scale));
  }
}

// Grid (chunks, rows): each block folds the finite |x| of its chunk of its
// row into absmax_bits[row] (finite magnitudes order like their bits).
template <int kSrc>
__global__ void AbsMaxKernel(const void* src, int64_t first_row,
                             int64_t row_size, unsigned int* absmax_bits) {
  __shared__ unsigned int block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  const int64_t row = first_row + blockIdx.y;
  const int64_t row_begin = row * row_size;
  unsigned int local = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < row_size;
       i += int64_t(blockDim.x) * gridDim.x) {
    const unsigned int abs =
        __float_as_uint(LoadF32<kSrc>(src, row_begin + i)) & 0x7FFFFFFFu;
    if (abs < 0x7F800000u) local = max(local, abs);
  }
  atomicMax(&block_max, local);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&absmax_bits[row], block_max);
}

// Turns absmax bits into scales in place (see ScaleForAbsMax in codec.h).
__global__ void ScaleKernel(float* scales, int64_t count, float fp8_max) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float absmax =
      __uint_as_float(reinterpret_cast<unsigned int*>(scales)[i]);
  scales[i] = absmax > 0.0f ? fmaxf(__fdiv_rn(absmax, fp8_max), FLT_MIN) : 1.0f;
}

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(
      blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

int LastError() {
  return cudaGetLastError() == cudaSuccess ? kCudaCodecOk : kCudaCodecCudaError;
}

template <int kSrc, int kDst>
void LaunchConvert(ScaleOp op, const void* src, int64_t n, const float* scales,
                   int64_t row_size, void* dst, cudaStream_t stream) {
  const int blocks = Blocks(n);
  switch (op) {
    case ScaleOp::kNone:
      ConvertKernel<kSrc, kDst, ScaleOp::kNone>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, row_size,
                                                    dst);
      break;
    case ScaleOp::kMultiply:
      ConvertKernel<kSrc, kDst, ScaleOp::kMultiply>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, row_size,
                                                    dst);
      break;
    case ScaleOp::kDivide:
      ConvertKernel<kSrc, kDst, ScaleOp::kDivide>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, row_size,
                                                    dst);
      break;
  }
}

template <int kSrc>
void LaunchConvertFrom(int dst_type, ScaleOp op, const void* src, int64_t n,
                       const float* scales, int64_t row_size, void* dst,
                       cudaStream_t stream) {
  switch (dst_type) {
    case 0:
      return LaunchConvert<kSrc, 0>(op, src, n, scales, row_size, dst, stream);
    case 1:
      return LaunchConvert<kSrc, 1>(op, src, n, scales, row_size, dst, stream);
    case 2:
      return LaunchConvert<kSrc, 2>(op, src, n, scales, row_size, dst, stream);
    case 3:
      return LaunchConvert<kSrc, 3>(op, src, n, scales, row_size, dst, stream);
    case 4:
      return LaunchConvert<kSrc, 4>(op, src, n, scales, row_size, dst, stream);
  }
}

void LaunchConvertAny(int src_type, int dst_type, ScaleOp op, const void* src,
                      int64_t n, const float* scales, int64_t row_size,
                      void* dst, cudaStream_t stream) {
  switch (src_type) {
    case 0:
      return LaunchConvertFrom<0>(dst_type, op, src, n, scales, row_size, dst,
                                  stream);
    case 1:
      return LaunchConvertFrom<1>(dst_type, op, src, n, scales, row_size, dst,
                                  stream);
    case 2:
      return LaunchConvertFrom<2>(dst_type, op, src, n, scales, row_size, dst,
                                  stream);
    case 3:
      return LaunchConvertFrom<3>(dst_type, op, src, n, scales, row_size, dst,
                                  stream);
    case 4:
      return LaunchConvertFrom<4>(dst_type, op, src, n, scales, row_size, dst,
                                  stream);
  }
}

template <int kSrc>
void LaunchBlockDecodeFrom(int dst_type, const void* src, int64_t n,
                           const float* scales, BlockScales grid, void* dst,
                           cudaStream_t stream) {
  const int blocks = Blocks(n);
  switch (dst_type) {
    case 0:
      BlockDecodeKernel<kSrc, 0>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, grid, dst);
      break;
    case 1:
      BlockDecodeKernel<kSrc, 1>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, grid, dst);
      break;
    case 2:
      BlockDecodeKernel<kSrc, 2>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(src, n, scales, grid, dst);
      break;
  }
}

// Per-block formats are fp8 (3, 4) decoded into a compute type (0, 1, 2).
void LaunchBlockDecode(int src_type, int dst_type, const void* src, int64_t n,
                       const float* scales, BlockScales grid, void* dst,
                       cudaStream_t stream) {
  if (src_type == 3) {
    LaunchBlockDecodeFrom<3>(dst_type, src, n, scales, grid, dst, stream);
  } else {
    LaunchBlockDecodeFrom<4>(dst_type, src, n, scales, grid, dst, stream);
  }
}

void LaunchAbsMax(int src_type, const void* src, int64_t rows, int64_t row_size,
                  unsigned int* absmax_bits, cudaStream_t stream) {
  const int64_t chunks = (Blocks(row_size) + 7) / 8;  // ~2k elements a block.
  for (int64_t first = 0; first < rows; first += kMaxBlocks) {
    const int64_t count = rows - first < kMaxBlocks ? rows - first : kMaxBlocks;
    const dim3 grid(static_cast<unsigned>(chunks),
                    static_cast<unsigned>(count));
    switch (src_type) {
      case 0:
        AbsMaxKernel<0><<<grid, kThreadsPerBlock, 0, stream>>>(
            src, first, row_size, absmax_bits);
        break;
      case 1:
        AbsMaxKernel<1><<<grid, kThreadsPerBlock, 0, stream>>>(
            src, first, row_size, absmax_bits);
        break;
      case 2:
        AbsMaxKernel<2><<<grid, kThreadsPerBlock, 0, stream>>>(
            src, first, row_size, absmax_bits);
        break;
    }
  }
}

// Rows and row size the scales apply to; false if the geometry is invalid.
bool ScaleGeometry(StorageFormat format, int64_t n, int64_t num_rows,
                   int64_t* rows, int64_t* row_size) {
  if (format.scaling == Scaling::kPerRow ||
      format.scaling == Scaling::kPerBlock) {
    if (num_rows < 0 || (n > 0 && num_rows == 0) ||
        (num_rows > 0 && n % num_rows != 0)) {
      return false;
    }
    *rows = num_rows;
    *row_size = num_rows > 0 ? n / num_rows : 0;
  } else {
    *rows = 1;
    *row_size = n;
  }
  return true;
}

bool ValidArgs(ElementType compute, const void* src, const void* dst, int64_t n,
               StorageFormat format, const float* scales) {
  if (n < 0 || !format.Validate().ok() || !IsComputeType(compute)) {
    return false;
  }
  if (n > 0 && (src == nullptr || dst == nullptr)) return false;
  return !format.is_scaled() || scales != nullptr;
}

}  // namespace

float CudaDecodeElementOnHost(ElementType type, uint32_t bits) {
  switch (type) {
    case ElementType::kF16:
      return DecodeSmall(F16(), bits);
    case ElementType::kBF16:
      return AsFloat(bits << 16);
    case ElementType::kF8E4M3FN:
      return DecodeSmall(E4M3FN(), bits);
    case ElementType::kF8E5M2:
      return DecodeSmall(E5M2(), bits);
    default:
      return AsFloat(bits);
  }
}

uint32_t CudaEncodeElementOnHost(ElementType type, float value) {
  switch (type) {
    case ElementType::kF16:
      return EncodeSmall(F16(), value);
    case ElementType::kBF16:
      return RoundToBf16(value);
    case ElementType::kF8E4M3FN:
      return EncodeSmall(E4M3FN(), value);
    case ElementType::kF8E5M2:
      return EncodeSmall(E5M2(), value);
    default:
      return AsBits(value);
  }
}

const char* CudaCodecErrorName(int error) {
  switch (error) {
    case kCudaCodecOk:
      return "ok";
    case kCudaCodecInvalidArgument:
      return "invalid argument";
    case kCudaCodecCudaError:
      return "CUDA error";
  }
  return "unknown error";
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky "no driver" error.
    return 0;
  }
  return count;
}

int CudaEncode(ElementType src_type, const void* device_src,
               int64_t num_elements, int64_t num_rows, StorageFormat format,
               void* device_dst, float* device_scales, void* stream) {
  int64_t rows, row_size;
  if (!ValidArgs(src_type, device_src, device_dst, num_elements, format,
                 device_scales) ||
      !ScaleGeometry(format, num_elements, num_rows, &rows, &row_size)) {
    return kCudaCodecInvalidArgument;
  }
  // Per-block storage comes from pre-quantized checkpoints as it is: it is
  // decoded on the device, never encoded there.
  if (format.scaling == Scaling::kPerBlock) return kCudaCodecInvalidArgument;
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  const int s = static_cast<int>(src_type),
            d = static_cast<int>(format.element);
  if (!format.is_scaled()) {
    if (num_elements > 0) {
      LaunchConvertAny(s, d, ScaleOp::kNone, device_src, num_elements, nullptr,
                       1, device_dst, cuda_stream);
    }
    return LastError();
  }
  if (rows == 0) return kCudaCodecOk;
  auto* absmax_bits = reinterpret_cast<unsigned int*>(device_scales);
  if (cudaMemsetAsync(absmax_bits, 0, rows * sizeof(float), cuda_stream) !=
      cudaSuccess) {
    return kCudaCodecCudaError;
  }
  if (row_size > 0) {
    LaunchAbsMax(s, device_src, rows, row_size, absmax_bits, cuda_stream);
  }
  ScaleKernel<<<Blocks(rows), kThreadsPerBlock, 0, cuda_stream>>>(
      device_scales, rows, Fp8MaxFinite(format.element));
  if (num_elements > 0) {
    LaunchConvertAny(s, d, ScaleOp::kDivide, device_src, num_elements,
                     device_scales, row_size, device_dst, cuda_stream);
  }
  return LastError();
}

int CudaDecode(StorageFormat format, const void* device_src,
               const float* device_scales, int64_t num_elements,
               int64_t num_rows, ElementType dst_type, void* device_dst,
               void* stream) {
  int64_t rows, row_size;
  if (!ValidArgs(dst_type, device_src, device_dst, num_elements, format,
                 device_scales) ||
      !ScaleGeometry(format, num_elements, num_rows, &rows, &row_size)) {
    return kCudaCodecInvalidArgument;
  }
  if (num_elements == 0) return kCudaCodecOk;
  if (format.scaling == Scaling::kPerBlock) {
    const BlockScales grid{
        row_size, format.block_rows, format.block_cols,
        (row_size + format.block_cols - 1) / format.block_cols};
    LaunchBlockDecode(static_cast<int>(format.element),
                      static_cast<int>(dst_type), device_src, num_elements,
                      device_scales, grid, device_dst,
                      static_cast<cudaStream_t>(stream));
    return LastError();
  }
  const ScaleOp op = format.is_scaled() ? ScaleOp::kMultiply : ScaleOp::kNone;
  LaunchConvertAny(static_cast<int>(format.element), static_cast<int>(dst_type),
                   op, device_src, num_elements, device_scales, row_size,
                   device_dst, static_cast<cudaStream_t>(stream));
  return LastError();
}

int CudaAllocate(int64_t bytes, void** device_ptr) {
  return cudaMalloc(device_ptr, bytes) == cudaSuccess ? kCudaCodecOk
                                                      : kCudaCodecCudaError;
}

int CudaRelease(void* device_ptr) {
  return cudaFree(device_ptr) == cudaSuccess ? kCudaCodecOk
                                             : kCudaCodecCudaError;
}

int CudaCopyToDevice(void* device_dst, const void* host_src, int64_t bytes) {
  return cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice) ==
                 cudaSuccess
             ? kCudaCodecOk
             : kCudaCodecCudaError;
}

int CudaCopyToHost(void* host_dst, const void* device_src, int64_t bytes) {
  return cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost) ==
                 cudaSuccess
             ? kCudaCodecOk
             : kCudaCodecCudaError;
}

int CudaSynchronize(void* stream) {
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) == cudaSuccess
             ? kCudaCodecOk
             : kCudaCodecCudaError;
}

}  // namespace castserve::casting
