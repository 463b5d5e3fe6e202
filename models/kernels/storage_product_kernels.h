// Internal to models/kernels/storage_product.h: the per-ISA kernels of a
// product that reads a weight in its storage format (plain or scaled), converts
// it in registers and accumulates in f32. LibTorch-free: raw pointers and
// counts, so that each ISA's file compiles with its own -m flags.
#ifndef CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_
#define CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_

#include <cstdint>

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

const ProductKernelTable& ReferenceProductKernels();
// Null when the build has no such kernels. The CPU check is the caller's.
const ProductKernelTable* Avx2ProductKernels();
const ProductKernelTable* Avx512ProductKernels();

}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_KERNELS_H_
