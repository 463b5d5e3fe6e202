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
// (any alignment). With `scales` non-null, element (f, c) is multiplied by
// scales[(f / scale_block_rows) * scale_grid_cols + c / scale_block_cols]:
// per tensor is one block of the whole matrix, per row a block of 1 x
// in_features, per block (e.g. 128 x 128) a grid (casting::ScaleGrid).
struct KernelWeight {
  const uint8_t* data = nullptr;
  casting::ElementType element = casting::ElementType::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const float* scales = nullptr;
  int64_t scale_block_rows = 1;
  int64_t scale_block_cols = 1;
  int64_t scale_grid_cols = 1;
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
