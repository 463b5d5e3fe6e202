// Products that read a weight in its storage format (compute from storage):
// y = x W^T + b where W is read straight from its bf16/f16/fp8 bytes (and
// scales), converted in registers and accumulated in f32, instead of
// decoding a compute copy of the whole weight first.
//
// Why: decoding one token reads every weight once, so decode time is the
// bytes of weights read per token. A compute copy makes it worse than f32
// resident: the step reads the storage, writes the f32 copy and reads it
// again. Reading the storage directly reads 1/2 (bf16) or 1/4 (fp8) of f32's
// bytes and writes nothing.
//
// When: on the CPU, for products with at most StorageProductMaxRows()
// activation rows (decode steps and small batches; fewer for resident f32),
// whatever the compute copy policy (ReadsStorageFor): a cached compute copy
// is then made and read only for larger products. Larger products (prefill)
// keep the compute copy and LinearProduct's GEMM, which is faster there: the
// fused kernel converts every weight once per group of 4 rows, a GEMM amortises
// one conversion over all rows. The default limit comes from matmul_benchmark's
// "storage_product" table (BENCHMARKS.md, "Compute from storage").
//
// Kernels (ProductIsa), the best the CPU runs unless one is asked for:
//  - amx_bf16 (the avx512_bf16 kernels and AMX tiles with bf16 products,
//    where Linux grants them): the same bf16 products as avx512_bf16's, for
//    BF16, E4M3FN and E5M2 weights scaled per tensor or row at most, on
//    tiles of 16 features x 16 rows x 32 columns (`tdpbf16ps`): the product
//    is computed as W x^T, so that bf16 weights are tile loads straight from
//    their storage and fp8 ones are widened to bf16 (exact) a few tiles
//    ahead; the activations, split into bf16 parts as below, are packed
//    once per product. From kAmxMinRows rows (see there); fewer rows, and
//    other weights, take the avx512_bf16 kernels. A stored infinity times a
//    zero part is NaN where f32 gives an infinity: a feature whose output is
//    NaN with split activations is computed again by the avx512 kernel.
//  - avx512_bf16 (AVX-512 with avx512_bf16 and avx512_vbmi), for bf16 and
//    fp8 weights: bf16 storage read as stored, fp8 codes widened to the
//    bf16 of the same value (exact) by two byte-table lookups (`vpermt2b`).
//    bf16 compute multiplies in bf16 with `vdpbf16ps` (two products per f32
//    lane and instruction; the activations are bf16 already, every product
//    exact in f32, sums in f32). f32 compute keeps f32's meaning: E4M3FN
//    weights at up to kNarrowE4M3MaxRows rows split the activations once
//    per product into kF32ComputeParts bf16 parts whose sum is the
//    activation (exact) for one `vdpbf16ps` per part; at more rows their
//    bf16 vectors are widened on to f32 (a shift) for one FMA per weight
//    and row; BF16 and E5M2 weights take the avx512 kernels, as fast there
//    (f16 compute: as f32, with 2 parts, exact). F32 and F16 weights take
//    the avx512 kernels.
//  - avx512, avx2 (+FMA, F16C) and a scalar reference: each weight widened
//    to f32 in registers (fp8 codes through f16 bit patterns, exact) and one
//    f32 FMA per weight and row.
// Per-tensor, per-row or grid (casting::ScaleGrid) scales are applied to
// each block's dot product. The output features are split over LibTorch's
// intra-op threads (at::parallel_for). Results agree with decode-then-matmul
// to f32 rounding (summation order), not bit for bit.
//
// Thread safety: all functions are thread-safe.
#ifndef CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_H_
#define CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/codec/codec.h"
#include "casting/weight.h"
#include "models/layers/activation.h"

namespace castserve::models {

// Products with at most this many rows read storage unless set otherwise.
// (The f32 kernel below is the resident f32 weight's product too.)
// From matmul_benchmark's storage table (BENCHMARKS.md, "Compute from
// storage"): on the Llama-1B shapes with f32 compute, the fused product beat
// decoding a copy then the f32 GEMM by 2.3-4.0x at 16 rows and 1.5-1.9x at
// 32, and was even (0.9-1.25x) at 64.
inline constexpr int64_t kDefaultStorageProductMaxRows = 32;
// Where the storage is the compute copy (bf16 stored and computed in), the
// other path makes no copy either: LibTorch's bf16 product on the storage.
// In matmul_benchmark (one weight, read from L3 again and again) the fused
// product was ahead up to 8 rows and even at 16; decoding 16 streams of the
// Llama-1B shape (weights from memory) it made castserve 1.3x faster than
// with this limit at 8 (BENCHMARKS.md, "Side by side with llama.cpp").
inline constexpr int64_t kStorageIsComputeMaxRows = 32;
// f32 stored resident and computed in f32: the avx512 kernel reads the f32
// weight at about the core's bandwidth, where oneDNN's product took 1.4-2.6x
// its time at 1-8 rows and was even at 16 (same table, "F32" rows).
inline constexpr int64_t kResidentF32MaxRows = 16;

// Parts the activations of an f32-compute product are split into for the
// avx512_bf16 kernels: 3 hold every finite normal f32 exactly (2 would be
// within about 2^-16 of each activation).
inline constexpr int kF32ComputeParts = 3;
// With more than one part, widening each weight to f32 in registers and
// one f32 FMA per row is as fast or faster (it widens once for all rows;
// the bf16 products run one instruction per part and row), except for
// E4M3FN weights at up to this many rows (matmul_benchmark).
inline constexpr int64_t kNarrowE4M3MaxRows = 1;
// The amx_bf16 kernels take products with BF16 weights of at least this
// many rows with bf16 activations, and of kAmxMinRowsSplit with activations
// split into parts (f32, f16); products with fp8 weights of at least
// kAmxMinRowsFp8 rows (their codes are widened to bf16 first). A tile
// multiplies 16 rows whatever the count (the padding's products are
// discarded), so its cost is that of 16 rows; below these counts the
// avx512_bf16 kernels were as fast or faster (matmul_benchmark's storage
// table on a Xeon with AMX, BENCHMARKS.md).
inline constexpr int64_t kAmxMinRows = 8;
inline constexpr int64_t kAmxMinRowsSplit = 16;
inline constexpr int64_t kAmxMinRowsFp8 = 16;

// Kernel families (see the file comment); BestProductIsa is the last one
// this CPU runs.
enum class ProductIsa { kReference, kAvx2, kAvx512, kAvx512Bf16, kAmxBf16 };
absl::string_view ProductIsaName(ProductIsa isa);
// Built in and run by this CPU.
bool ProductIsaSupported(ProductIsa isa);
ProductIsa BestProductIsa();

// Process-wide, before serving (main, benchmarks, tests); a later call
// applies to later products. 0 turns reading storage off: every product
// takes a compute copy (the path before compute from storage).
void SetStorageProductMaxRows(int64_t rows);
int64_t StorageProductMaxRows();

// Which products with a weight may read its storage; fixed by the weight's
// options, so a layer classifies its weight once (StorageReadsOf) and then
// decides per product with the rows alone (ReadsStorageFor).
enum class StorageReads {
  kNever,             // Not on the CPU, or not rank 2.
  kConverted,         // Up to StorageProductMaxRows() rows.
  kStorageIsCompute,  // Up to min(that, kStorageIsComputeMaxRows) rows.
  kResidentF32,       // Up to min(that, kResidentF32MaxRows) rows.
};

// On the CPU and rank 2: F32 stored resident and computed in f32
// (kResidentF32); resident storage that is the compute copy itself
// (kStorageIsCompute); any other format, resident or mapped, whose compute
// copy is decoded from it, transient or cached (kConverted); else kNever.
// Decode steps are bound by the weight bytes they read, and the storage is
// at most the bytes of a cached copy: half of an f32 copy's for bf16, a
// quarter for fp8 (BENCHMARKS.md, "Compute from storage").
StorageReads StorageReadsOf(const casting::Weight& weight);

// True when a product of `rows` activation rows (negative: not known yet,
// counted as few) reads the storage of a weight classified `reads`.
inline bool ReadsStorageFor(StorageReads reads, int64_t rows) {
  const int64_t max_rows = StorageProductMaxRows();
  switch (reads) {
    case StorageReads::kNever:
      return false;
    case StorageReads::kConverted:
      return rows <= max_rows && max_rows > 0;
    case StorageReads::kStorageIsCompute:
      return rows <= max_rows && max_rows > 0 &&
             rows <= kStorageIsComputeMaxRows;
    case StorageReads::kResidentF32:
      return rows <= max_rows && max_rows > 0 && rows <= kResidentF32MaxRows;
  }
  return false;
}

// ReadsStorageFor(StorageReadsOf(weight), rows).
bool ReadsStorageFor(const casting::Weight& weight, int64_t rows);

// y = x W^T + b for `x` [..., in] (f32, bf16 or f16: the compute dtype),
// W the [out, in] matrix `weight` views, `bias` [out] in x's dtype or
// undefined; then `activation` when given. Returns x's dtype. Accumulates in
// f32; the bias is added in f32 before rounding to x's dtype. DATA_LOSS if
// a mapped weight's file was truncated. `isa` unset: the best the CPU runs
// (BestProductIsa()); an unsupported one is FAILED_PRECONDITION.
absl::StatusOr<at::Tensor> StorageProduct(
    const at::Tensor& x, const casting::StorageView& weight,
    const at::Tensor& bias, std::optional<Activation> activation = std::nullopt,
    std::optional<ProductIsa> isa = std::nullopt);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_H_
