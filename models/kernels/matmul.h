// The product of activations with a layer's weight matrix (y = x W^T + b),
// and which CPU kernel computes it in f32.
//
// LibTorch hands f32 products on the CPU to the BLAS it was built with
// (MKL in the PyPI wheel), bf16 ones to oneDNN on AVX-512 CPUs. MKL picks its
// kernels by CPU vendor: on an AMD EPYC with AVX-512 it runs its sgemm at
// about half the speed of oneDNN's f32 matmul on the same core (measured
// in BENCHMARKS.md, "f32 matmul kernels"); on Intel CPUs the two are close.
// A server must not inherit that: castserve measures both kernels once per
// process (a few milliseconds, on the first f32 product or at start) and
// uses the faster, unless --cpu-f32-matmul names one.
//
// Only the kernel changes: both compute in f32 (no reduced precision), so
// results differ by summation order only (~1e-6 relative).
#ifndef CASTSERVE_MODELS_KERNELS_MATMUL_H_
#define CASTSERVE_MODELS_KERNELS_MATMUL_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "models/kernels/matmul_kernel.h"
#include "models/layers/activation.h"

namespace castserve::models {

// What the one-off measurement found (microseconds per product of the
// probe shape, best of a few), and what it chose.
struct F32MatmulChoice {
  F32MatmulKernel kernel = F32MatmulKernel::kBlas;
  bool measured = false;  // False when a flag chose it, or oneDNN is absent.
  double blas_us = 0;
  double onednn_us = 0;
};

// Process-wide, before serving (main, benchmarks, tests): kAuto (the
// default) measures on the first f32 product; kBlas and kOneDnn force one.
// Thread-safe; a later call replaces the choice for later products.
void SetF32MatmulKernel(F32MatmulKernel kernel);
// The kernel f32 products use now, measuring first when it is still kAuto
// (once per process; concurrent callers wait for the one measurement).
F32MatmulChoice ResolveF32MatmulKernel();

// True when this CPU has AVX-512 BW, VL and DQ (cpuinfo's avx512_bw,
// avx512_vl, avx512_dq), what LibTorch requires to run bf16 products on
// oneDNN: then LinearProduct runs bf16 and f16 products there, with fused
// activations.
bool OneDnnRunsReducedPrecision();

// Products with fewer rows than this stay on at::linear whatever the
// choice: at decode-sized batches the two kernels trade places by shape.
inline constexpr int64_t kOneDnnMinRows = 16;

// y = x W^T + b for `x` [..., in], `weight` [out, in], `bias` [out] or
// undefined, as at::linear, then `activation` when given. On the CPU, with
// at least kOneDnnMinRows rows, oneDNN computes f32 products when it is the
// chosen kernel and bf16/f16 products when OneDnnRunsReducedPrecision()
// (for bf16, where at::linear would run them too), fusing GELU (erf and tanh),
// SiLU and ReLU into the product: the activation reads the f32 accumulator
// instead of a second pass over a rounded output. Everything else (CUDA, quick
// GELU, few rows, f32 on LibTorch's BLAS) is at::linear followed by Activate.
at::Tensor LinearProduct(const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias,
                         std::optional<Activation> activation = std::nullopt);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_MATMUL_H_
