// Internal to models/kernels/storage_product.h: the product loop shared by
// every kernel family, written once over an "ops" type V that supplies lanes of
// f32:
//
//   static constexpr int kLanes;
//   using Vec;                                     // kLanes f32 values
//   static Vec Zero();
//   static Vec LoadX(const float* x);              // kLanes activations
//   template <ElementType T> static Vec LoadWeight(const uint8_t* w);
//   template <ElementType T> static constexpr float WeightFactor();
//   static Vec Fma(Vec a, Vec b, Vec acc);         // a * b + acc
//   static float Sum(Vec v);
//
// LoadWeight may return the weights divided by WeightFactor (a power of
// two, exact), which the loop multiplies back once per dot product.
//
// The loops over rows and features of a tile are unrolled (pragmas, and
// -O3 on the kernel files), so that the accumulators stay in registers.
//
// Tiling: up to 4 activation rows by 4 (8 for one row) output features
// keep their accumulators in registers; each weight vector is converted once
// per row group and used for every row of it; row groups run inside the loop
// over feature tiles (Product). Each weight load prefetches the same place
// in the next tile's rows (the rows of a tile are consecutive, so that is
// kFeatures rows on): with rows of a few KiB (2048 bf16 columns: one page)
// the hardware prefetcher, which stops at page boundaries, starts each tile
// cold. The prefetch goes to L2, not L1 (locality hint 2: prefetcht1): a
// tile is 16-128 KiB, so the next one prefetched into a 32-48 KiB L1
// evicted the lines of the tile being read, which then came from L2 again;
// decode from L1 prefetches ran at 0.55-0.85x the speed (BENCHMARKS.md,
// "Compute from storage"). (A prefetch past the weight's end is harmless:
// it never faults.)
// Columns split at the scale grid's block boundaries; elements after the last
// full vector of a block go through the scalar reference conversion.
//
// Included only by the per-ISA .cc files, each compiled with its own -m
// flags; everything here has internal linkage so that no ISA-specific code
// is shared between translation units through the linker.
#ifndef CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_SIMD_H_
#define CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_SIMD_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "casting/codec/codec.h"
#include "casting/codec/element_loads.h"
#include "casting/codec/storage_format.h"
#include "models/kernels/storage_product_kernels.h"

namespace castserve::models::internal {
namespace {

using casting::ElementType;

template <ElementType kType>
float ScalarWeight(const uint8_t* src) {
  return casting::ElementBitsToF32(kType,
                                   casting::internal::LoadBits<kType>(src));
}

// The scale of feature `f` in column block `block` (1 when unscaled).
inline float ScaleOf(const KernelWeight& w, int64_t f, int64_t block) {
  if (w.scales.data == nullptr) return 1.0f;
  return w.scales.data[(f / w.scales.block_rows) * w.scales.grid_cols + block];
}

// Columns per block of the kernel's loop: the scale grid's, or all of them.
inline int64_t ColumnBlock(const KernelWeight& w) {
  if (w.scales.data == nullptr || w.scales.block_cols >= w.in_features) {
    return std::max<int64_t>(w.in_features, 1);
  }
  return w.scales.block_cols;
}

// kRows rows of x from `x` times kFeatures features whose rows start at
// `rows[f]`; adds nothing, writes y[r * y_stride + f] for f < num_features.
template <class V, ElementType kW, int kRows, int kFeatures>
void Tile(const float* x, const KernelWeight& w, const uint8_t* const* rows,
          int64_t f0, int num_features, float* y) {
  using Vec = typename V::Vec;
  constexpr int64_t kBytes = casting::ElementSizeBytes(kW);
  const int64_t k = w.in_features;
  const int64_t block = ColumnBlock(w);
  const int64_t next_tile = kFeatures * k * kBytes;
  float out[kRows][kFeatures] = {};
  for (int64_t c0 = 0, b = 0; c0 < k; c0 += block, ++b) {
    const int64_t c1 = std::min(k, c0 + block);
    Vec acc[kRows][kFeatures];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
      for (int f = 0; f < kFeatures; ++f) acc[r][f] = V::Zero();
    }
    int64_t c = c0;
    for (; c + V::kLanes <= c1; c += V::kLanes) {
      Vec weights[kFeatures];
#pragma GCC unroll 8
      for (int f = 0; f < kFeatures; ++f) {
        weights[f] = V::template LoadWeight<kW>(rows[f] + c * kBytes);
        if constexpr (V::kLanes > 1) {
          __builtin_prefetch(rows[f] + c * kBytes + next_tile, 0, 2);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const Vec xv = V::LoadX(x + r * k + c);
#pragma GCC unroll 8
        for (int f = 0; f < kFeatures; ++f) {
          acc[r][f] = V::Fma(xv, weights[f], acc[r][f]);
        }
      }
    }
    float sums[kRows][kFeatures];
    for (int r = 0; r < kRows; ++r) {
      for (int f = 0; f < kFeatures; ++f) {
        sums[r][f] = V::Sum(acc[r][f]) * V::template WeightFactor<kW>();
      }
    }
    for (; c < c1; ++c) {
      for (int f = 0; f < kFeatures; ++f) {
        const float weight = ScalarWeight<kW>(rows[f] + c * kBytes);
        for (int r = 0; r < kRows; ++r) sums[r][f] += x[r * k + c] * weight;
      }
    }
    for (int f = 0; f < kFeatures; ++f) {
      const float scale = ScaleOf(w, f0 + f, b);
      for (int r = 0; r < kRows; ++r) out[r][f] += scale * sums[r][f];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int f = 0; f < num_features; ++f) {
      y[r * w.out_features + f0 + f] = out[r][f];
    }
  }
}

// Features [f_begin, f_end) for kRows rows, kFeatures at a time; a last
// partial tile repeats its last feature's row (read, not written).
template <class V, ElementType kW, int kRows, int kFeatures>
void RowGroup(const float* x, const KernelWeight& w, int64_t f_begin,
              int64_t f_end, float* y) {
  const int64_t row_bytes = w.in_features * casting::ElementSizeBytes(kW);
  for (int64_t f0 = f_begin; f0 < f_end; f0 += kFeatures) {
    const int num_features =
        static_cast<int>(std::min<int64_t>(kFeatures, f_end - f0));
    const uint8_t* rows[kFeatures];
    for (int f = 0; f < kFeatures; ++f) {
      rows[f] = w.data + (f0 + std::min(f, num_features - 1)) * row_bytes;
    }
    Tile<V, kW, kRows, kFeatures>(x, w, rows, f0, num_features, y);
  }
}

// One row: 8 features per tile. More rows: the loop over groups of up to 4
// rows runs inside the loop over tiles of 4 features, so that a tile's
// weight rows come from memory once and from cache for the other groups.
template <class V, ElementType kW>
void Product(const float* x, int64_t rows, const KernelWeight& w,
             int64_t f_begin, int64_t f_end, float* y) {
  if (rows == 1) {
    RowGroup<V, kW, 1, 8>(x, w, f_begin, f_end, y);
    return;
  }
  for (int64_t f0 = f_begin; f0 < f_end; f0 += 4) {
    const int64_t f1 = std::min<int64_t>(f_end, f0 + 4);
    for (int64_t r = 0; r < rows; r += 4) {
      const float* xr = x + r * w.in_features;
      float* yr = y + r * w.out_features;
      switch (std::min<int64_t>(4, rows - r)) {
        case 4:
          RowGroup<V, kW, 4, 4>(xr, w, f0, f1, yr);
          break;
        case 3:
          RowGroup<V, kW, 3, 4>(xr, w, f0, f1, yr);
          break;
        case 2:
          RowGroup<V, kW, 2, 4>(xr, w, f0, f1, yr);
          break;
        default:
          RowGroup<V, kW, 1, 4>(xr, w, f0, f1, yr);
          break;
      }
    }
  }
}

template <class V, int... kTypes>
ProductKernelTable MakeProductKernelTable(
    const char* name, std::integer_sequence<int, kTypes...>) {
  ProductKernelTable table = {};
  table.name = name;
  ((table.product[kTypes] = &Product<V, static_cast<ElementType>(kTypes)>),
   ...);
  return table;
}

template <class V>
ProductKernelTable MakeProductKernelTable(const char* name) {
  return MakeProductKernelTable<V>(
      name, std::make_integer_sequence<int, casting::kNumElementTypes>());
}

}  // namespace
}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_SIMD_H_
