// CPU codec between compute dtypes (F32, BF16, F16) and storage formats.
//
// LibTorch-free: raw pointers and element counts. Every conversion is defined
// as "source element -> exact f32 -> (optional scale) -> round to the
// destination", and every kernel (scalar reference, lookup table, AVX2,
// AVX-512, threaded or not) produces the same bits as the scalar reference.
//
// Rounding and special values:
// - Rounding is round-to-nearest-even everywhere; f32 subnormals are honoured
//   (the kernels assume the default MXCSR: no FTZ/DAZ).
// - NaN stays NaN with its sign: fp8 gets the canonical NaN (E4M3FN 0x7F,
//   E5M2 0x7E), BF16 gets 0x7FC0, F16 keeps the top payload bits and is
//   quieted (as F16C does). Decoded fp8 NaN is the f32 quiet NaN 0x7FC00000.
// - fp8 SATURATES: a finite value whose rounded magnitude exceeds the largest
//   finite fp8 value (448 for E4M3FN, 57344 for E5M2) becomes +-max. This
//   differs from PyTorch's plain `.to(torch.float8_e4m3fn)`, which gives NaN
//   there (and from ml_dtypes, which gives NaN / inf). Values that round to
//   max under round-to-nearest-even (up to 464 / 61440) agree with both.
// - Infinity: E4M3FN has no inf, so +-inf saturates to +-448; E5M2 keeps
//   +-inf as +-inf (0x7C / 0xFC).
// - BF16 and F16 follow IEEE: overflow rounds to inf, inf stays inf.
//
// Scaled fp8 (Scaling::kPerTensor / kPerRow / kPerBlock): for each tensor,
// row or block (casting/codec/storage_format.h gives the scale layout),
// scale = max(absmax / fp8_max, FLT_MIN), where absmax ignores NaN and inf;
// scale = 1 when there is no finite non-zero value. Encode stores
// q = fp8(x / scale) (an f32 division) and the scale; decode gives
// dst(f32(q) * scale).
//
// Large tensors are split into chunks run on std::threads (see CodecOptions).
// All functions are thread-safe; buffers must not overlap.
#ifndef CASTSERVE_CASTING_CODEC_CODEC_H_
#define CASTSERVE_CASTING_CODEC_CODEC_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "casting/codec/storage_format.h"

namespace castserve::casting {

// Kernel families. kReference is the scalar code the others are tested
// against; kPortable is scalar with lookup tables for fp8 decode.
enum class CodecIsa { kReference, kPortable, kAvx2, kAvx512 };

absl::string_view CodecIsaName(CodecIsa isa);
// True if the kernels are compiled in and this CPU can run them.
bool CodecIsaSupported(CodecIsa isa);
// The fastest supported family (checked once with __builtin_cpu_supports).
CodecIsa BestCodecIsa();

struct CodecOptions {
  // Unset: BestCodecIsa(). An unsupported ISA is an error.
  std::optional<CodecIsa> isa;
  // Upper bound on threads, including the caller's; 0 = hardware threads.
  int max_threads = 0;
  // Tensors smaller than 2x this run on the calling thread only.
  int64_t min_elements_per_thread = int64_t{1} << 20;
};

// Encodes `num_elements` elements of `src` (of compute type `src_type`) into
// `format`: `dst` receives num_elements * format.element_size_bytes() bytes;
// for scaled formats `dst_scales` receives 1 (kPerTensor), `num_rows`
// (kPerRow) or one per block (kPerBlock, format.NumScales of [num_rows,
// num_elements / num_rows]) f32 scales and may be null otherwise.
// `num_rows` is dim 0 of the tensor; it is used only for kPerRow and
// kPerBlock and must divide num_elements.
absl::Status Encode(ElementType src_type, const void* src, int64_t num_elements,
                    int64_t num_rows, StorageFormat format, void* dst,
                    float* dst_scales, const CodecOptions& options = {});

// Decodes `num_elements` elements stored in `format` (data `src`, scales
// `src_scales` as written by Encode) into compute type `dst_type` at `dst`.
absl::Status Decode(StorageFormat format, const void* src,
                    const float* src_scales, int64_t num_elements,
                    int64_t num_rows, ElementType dst_type, void* dst,
                    const CodecOptions& options = {});

// Runs `read`, which reads only the `size_bytes` bytes at `src`; an error if
// the read could not complete (casting::ReadFromMapping: a vanished page of a
// file mapping).
using ReadGuard = absl::FunctionRef<absl::Status(
    const void* src, size_t size_bytes, absl::FunctionRef<void()> read)>;

// Decode of a plain (unscaled) `src_type` source whose reads may fail, such
// as a file mapping: each thread reads its share of `src` through `guard`,
// on that thread. Returns the first error; `dst` is then partly written.
absl::Status DecodeGuarded(ElementType src_type, const void* src,
                           int64_t num_elements, ElementType dst_type,
                           void* dst, ReadGuard guard,
                           const CodecOptions& options = {});

// Encode of a `src_type` source whose reads may fail, as DecodeGuarded, into
// a format whose rows encode on their own (Scaling::kNone or kPerRow; others
// are InvalidArgument): each thread encodes its share of whole rows, reading
// them through `guard`. The same bytes and scales as Encode.
absl::Status EncodeGuarded(ElementType src_type, const void* src,
                           int64_t num_elements, int64_t num_rows,
                           StorageFormat format, void* dst, float* dst_scales,
                           ReadGuard guard, const CodecOptions& options = {});

// The scale Encode uses for a tensor or row with the given finite absmax.
float ScaleForAbsMax(float absmax, ElementType fp8_type);

// Scalar reference conversions of one element, given as its bit pattern in
// the low bits of a uint32_t (all types, including F32). Exact for decode.
float ElementBitsToF32(ElementType type, uint32_t bits);
uint32_t F32ToElementBits(ElementType type, float value);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_CODEC_CODEC_H_
