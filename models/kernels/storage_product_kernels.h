// Internal to models/kernels/storage_product.h: the per-ISA kernels of a
// product that reads a weight in its storage format (plain or scaled), converts
// it in registers and accumulates in f32. LibTorch-free: raw pointers and
// counts, so that each ISA's file compiles with its own -m flags.
#ifndef CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_
#define CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"

namespace castserve::models::internal {

// A weight matrix as a kernel reads it: `out_features` rows of
// `in_features` elements of `element`, row-major and contiguous, at `data`
// (any alignment). With scales.data non-null, element (f, c) is multiplied
// by scales.At(f, c) (casting::ScaleGrid: per tensor, per row or per block).
struct KernelWeight {
  const uint8_t* data = nullptr;
  casting::ElementType element = casting::ElementType::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  casting::ScaleGrid scales;
};

// y[r * w.out_features + f] = sum_c x[r * w.in_features + c] * W(f, c), in
// f32, for r in [0, rows) and f in [f_begin, f_end); writes nothing else.
// `x` is f32, row-major, contiguous. Summation order is the kernel's own:
// results agree with decode-then-matmul to rounding, not bit for bit.
using ProductFn = void (*)(const float* x, int64_t rows, const KernelWeight& w,
                           int64_t f_begin, int64_t f_end, float* y);

// Indexed by static_cast<int>(ElementType); every entry is filled.
struct ProductKernelTable {
  const char* name;
  ProductFn product[casting::kNumElementTypes];
};

// The narrow kernels (storage_product_avx512bf16.cc) multiply in bf16 with
// `vdpbf16ps`: the weights as bf16 (bf16 storage as stored, fp8 codes widened
// to the bf16 of the same value: exact), the activations split once per
// product into `parts` bf16 planes whose sum is the activation (1 part: x is
// bf16; 2: within about 2^-16 |x|; 3: exact for finite normal f32). Each
// product of a part and a weight is exact in f32; the sums accumulate in f32.
//
// planes[(r * parts + p) * w.in_features + c] is part p of row r's column c,
// except that inside each full vector chunk of a scale block the columns are
// in the order the kernel widens the weights (for fp8: per 128-bit lane, the
// low 8 codes then the high 8); SplitActivations writes that order.
using NarrowProductFn = void (*)(const uint16_t* planes, int parts,
                                 int64_t rows, const KernelWeight& w,
                                 int64_t f_begin, int64_t f_end, float* y);

struct NarrowKernelTable {
  const char* name;
  // Writes `rows` rows of x as planes for `w` (its element type and scale
  // blocks fix the column order) with the fewest parts, at most `max_parts`
  // (1 to 3), that hold every activation exactly (max_parts when none does);
  // returns the parts written. `planes` holds rows * max_parts *
  // w.in_features values.
  int (*split)(const float* x, int64_t rows, const KernelWeight& w,
               int max_parts, uint16_t* planes);
  // Null for element types that are not exact in bf16 (F32, F16).
  NarrowProductFn product[casting::kNumElementTypes];
  // The same weights widened through bf16 to f32 in registers, one f32 FMA
  // per weight and row, for f32 activations: `permute` writes `rows` rows of
  // x in the column order `widened` reads (as planes, per chunk), into `out`
  // (rows * w.in_features floats). Null where the avx512 kernels are as
  // fast.
  void (*permute)(const float* x, int64_t rows, const KernelWeight& w,
                  float* out);
  ProductFn widened[casting::kNumElementTypes];
};

// The AMX kernels (storage_product_amx.cc): the narrow kernels' products
// on AMX tiles, from activation planes split as NarrowKernelTable::split
// writes them for a BF16 weight (every column in order, whatever the
// weight's element type), which `pack` rearranges once per product into
// the tiles' layout; every `product` of that product reads it. They take
// weights without scales, or with one scale per tensor or per row (a grid
// with a single column block).
struct AmxKernelTable {
  const char* name;
  // The bytes `pack` writes.
  int64_t (*packed_bytes)(int64_t rows, int parts, int64_t in_features);
  void (*pack)(const uint16_t* planes, int parts, int64_t rows,
               int64_t in_features, uint16_t* packed);
  // As NarrowProductFn, reading packed activations; null for element
  // types that are not exact in bf16.
  NarrowProductFn product[casting::kNumElementTypes];
};

// The bf16 bits of fp8 code `magnitude` (sign bit clear) of `type`: the
// same value, exact; a quiet NaN for a NaN code. The bf16 kernels' tables.
inline uint16_t Fp8MagnitudeBf16(casting::ElementType type,
                                 uint32_t magnitude) {
  const float value = casting::ElementBitsToF32(type, magnitude);
  if (std::isnan(value)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

const ProductKernelTable& ReferenceProductKernels();
// Null when the build has no such kernels. The CPU check is the caller's.
const ProductKernelTable* Avx2ProductKernels();
const ProductKernelTable* Avx512ProductKernels();
const NarrowKernelTable* Avx512Bf16ProductKernels();
const AmxKernelTable* AmxProductKernels();
// The CPU has AMX tiles with bf16 products and Linux let this process use
// them (asked once, on the first call).
bool AmxUsable();

}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_
