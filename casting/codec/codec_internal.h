// Internal to the codec: the per-ISA kernel tables that codec.cc dispatches
// to. Not part of the public API.
#ifndef CASTSERVE_CASTING_CODEC_CODEC_INTERNAL_H_
#define CASTSERVE_CASTING_CODEC_CODEC_INTERNAL_H_

#include <cstdint>

#include "casting/codec/storage_format.h"

namespace castserve::casting::internal {

// Converts `n` contiguous elements. `scale` is ignored by plain kernels,
// multiplies the f32 value in decode kernels and divides it in encode ones.
using ConvertFn = void (*)(const void* src, int64_t n, float scale, void* dst);
// Largest |x| over the finite elements of `src` (0 if none).
using AbsMaxFn = float (*)(const void* src, int64_t n);

// Indexed by static_cast<int>(ElementType). All pairs are filled; same-type
// plain pairs are byte copies.
struct KernelTable {
  const char* name;
  ConvertFn plain[kNumElementTypes][kNumElementTypes];
  ConvertFn multiply[kNumElementTypes][kNumElementTypes];  // Scaled decode.
  ConvertFn divide[kNumElementTypes][kNumElementTypes];    // Scaled encode.
  AbsMaxFn absmax[kNumElementTypes];
};

const KernelTable& ReferenceKernels();
const KernelTable& PortableKernels();
// Null when the build has no such kernels. The CPU check is the caller's.
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();

}  // namespace castserve::casting::internal

#endif  // CASTSERVE_CASTING_CODEC_CODEC_INTERNAL_H_
