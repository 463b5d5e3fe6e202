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
// activation rows (decode steps and small batches; fewer where the storage
// is the compute copy), and only for weights whose compute copy would be
// transient or is the storage itself (ReadsStorageFor). Larger products
// (prefill) keep the compute copy and LinearProduct's GEMM, which is faster
// there: the fused kernel converts every weight once per group of 4 rows, a
// GEMM amortises one conversion over all rows. The default limit comes from
// matmul_benchmark's "storage_product" table (BENCHMARKS.md, "Compute from
// storage").
//
// Kernels: AVX-512, AVX2 (+FMA, F16C) and a scalar reference, chosen by the
// CPU's features as the codec chooses (casting::BestCodecIsa); fp8 codes
// become f16 bit patterns in 16-bit lanes and then f32 (exact), with
// per-tensor, per-row or grid (casting::ScaleGrid) scales applied to each
// block's dot product. The output features are split over LibTorch's
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
#include "casting/codec/codec.h"
#include "casting/weight.h"
#include "models/layers/activation.h"

namespace castserve::models {

// Products with at most this many rows read storage unless set otherwise.
// From matmul_benchmark's storage table (BENCHMARKS.md, "Compute from
// storage"): on the Llama-1B shapes with f32 compute, the fused product beat
// decoding a copy then the f32 GEMM by 1.1-2.4x at 16 rows and was even
// (0.7-1.2x) at 32.
inline constexpr int64_t kDefaultStorageProductMaxRows = 16;
// Where the storage is the compute copy (bf16 stored and computed in), the
// other path makes no copy either: LibTorch's bf16 product on the storage
// was about as fast up to 4 rows and faster from 8 (same table).
inline constexpr int64_t kStorageIsComputeMaxRows = 4;

// Process-wide, before serving (main, benchmarks, tests); a later call
// applies to later products. 0 turns reading storage off: every product
// takes a compute copy (the path before compute from storage).
void SetStorageProductMaxRows(int64_t rows);
int64_t StorageProductMaxRows();

// True when a product of `rows` activation rows (negative: not known yet,
// counted as few) with `weight` reads its storage: on the CPU, rank 2,
// stored in a format narrower than F32 (resident or mapped), with a compute
// copy that would be transient (rows <= StorageProductMaxRows()) or is the
// storage itself (rows <= min(that, kStorageIsComputeMaxRows)); never with
// a cached copy, which is made once and then read.
bool ReadsStorageFor(const casting::Weight& weight, int64_t rows);

// y = x W^T + b for `x` [..., in] (f32, bf16 or f16: the compute dtype),
// W the [out, in] matrix `weight` views, `bias` [out] in x's dtype or
// undefined; then `activation` when given. Returns x's dtype. Accumulates in
// f32; the bias is added in f32 before rounding to x's dtype. DATA_LOSS if
// a mapped weight's file was truncated. `isa` unset: the best the CPU runs.
absl::StatusOr<at::Tensor> StorageProduct(
    const at::Tensor& x, const casting::StorageView& weight,
    const at::Tensor& bias, std::optional<Activation> activation = std::nullopt,
    std::optional<casting::CodecIsa> isa = std::nullopt);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_STORAGE_PRODUCT_H_
