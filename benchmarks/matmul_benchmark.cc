// The layer products of castserve's architectures on this CPU, each kernel
// beside the other in one process, interleaved (models/kernels/matmul.h):
//  - f32: LibTorch's BLAS (at::linear, MKL in the PyPI wheel) against
//    oneDNN's matmul (what --cpu-f32-matmul=auto measures once at start);
//  - f32 and bf16 with an activation: the product then the activation
//    (two passes) against oneDNN with the activation fused into the
//    product (Linear::ForwardActivated).
//  - compute from storage (models/kernels/storage_product.h): the fused product
//  that
//    reads bf16 / fp8 weights against decoding an f32 copy then the f32
//    product (layerwise casting before it), and the f32 product on an f32
//    weight (resident f32), at decode-sized rows, with the GB/s of weight
//    bytes the fused kernel reads; the crossover in rows is where
//    kDefaultStorageProductMaxRows comes from.
// Shapes: rows (batch x tokens) x in -> out of MiniLM, SigLIP-base and the
// Llama-1B shape, prefill- and decode-sized.
//
//   bazel run -c opt //benchmarks:matmul_benchmark -- [--threads=1]
//       [--rounds=15] [--only=storage]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "models/kernels/matmul.h"
#include "models/kernels/storage_product.h"

namespace castserve {
namespace {

struct Shape {
  const char* what;
  int64_t rows, in, out;
};

constexpr Shape kShapes[] = {
    {"MiniLM [1,128] intermediate", 128, 384, 1536},
    {"MiniLM [16,128] output", 2048, 1536, 384},
    {"SigLIP b1 qkv", 197, 768, 768},
    {"SigLIP b8 fc1", 1576, 768, 3072},
    {"SigLIP b8 fc2", 1576, 3072, 768},
    {"Llama-1B prefill 128 gate", 128, 2048, 8192},
    {"Llama-1B decode 8 gate", 8, 2048, 8192},
    {"Llama-1B decode 1 down", 1, 8192, 2048},
};

// One run of `fn`, in microseconds.
double Microseconds(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// Times `a` and `b` alternately; returns the medians.
std::pair<double, double> Compare(const std::function<void()>& a,
                                  const std::function<void()>& b, int rounds) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(Microseconds(a));
    tb.push_back(Microseconds(b));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

void F32Kernels(int rounds) {
  std::printf(
      "\nf32 products: LibTorch's BLAS vs oneDNN (median us of %d)\n"
      "%-30s %10s %10s %8s\n",
      rounds, "shape (rows x in -> out)", "blas us", "onednn us", "ratio");
  for (const Shape& s : kShapes) {
    const at::Tensor x = at::randn({s.rows, s.in});
    const at::Tensor w = at::randn({s.out, s.in}) * 0.02;
    // at::linear is LinearProduct's BLAS path; the choice is set once
    // (setting it per call would time its lock too).
    models::SetF32MatmulKernel(models::F32MatmulKernel::kOneDnn);
    auto [blas, onednn] =
        Compare([&] { at::linear(x, w); },
                [&] { models::LinearProduct(x, w, at::Tensor()); }, rounds);
    std::printf("%-30s %10.0f %10.0f %8.3f%s\n", s.what, blas, onednn,
                onednn / blas,
                s.rows < models::kOneDnnMinRows ? "  (stays on blas)" : "");
  }
}

void FusedActivation(at::ScalarType dtype, const char* name, int rounds) {
  std::printf(
      "\n%s product + GELU (tanh): two passes vs fused (median us of %d)\n"
      "%-30s %10s %10s %8s\n",
      name, rounds, "shape (rows x in -> out)", "two us", "fused us", "ratio");
  models::SetF32MatmulKernel(models::F32MatmulKernel::kOneDnn);
  for (const Shape& s : kShapes) {
    const at::Tensor x = at::randn({s.rows, s.in}).to(dtype);
    const at::Tensor w = (at::randn({s.out, s.in}) * 0.02).to(dtype);
    const at::Tensor b = at::randn({s.out}).to(dtype);
    auto [two, fused] = Compare(
        [&] {
          models::Activate(models::Activation::kGeluTanh,
                           models::LinearProduct(x, w, b));
        },
        [&] { models::LinearProduct(x, w, b, models::Activation::kGeluTanh); },
        rounds);
    std::printf("%-30s %10.0f %10.0f %8.3f\n", s.what, two, fused, fused / two);
  }
}

// Times each of `fns` in turn, `rounds` times; returns their medians.
std::vector<double> CompareAll(const std::vector<std::function<void()>>& fns,
                               int rounds) {
  for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> times(fns.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      times[i].push_back(Microseconds(fns[i]));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

// A weight in a storage format, as Weight::ReadStorage would view it.
struct StoredWeight {
  at::Tensor bytes;
  at::Tensor scales;
  casting::StorageView view;
};

StoredWeight Store(const at::Tensor& w, casting::StorageFormat format) {
  StoredWeight s;
  const int64_t out = w.size(0), in = w.size(1);
  s.bytes = at::empty({w.numel() * format.element_size_bytes()}, at::kByte);
  s.scales = at::ones({format.scaling == casting::Scaling::kPerRow ? out : 1},
                      at::kFloat);
  (void)casting::Encode(casting::ElementType::kF32, w.data_ptr(), w.numel(),
                        out, format, s.bytes.data_ptr(),
                        s.scales.data_ptr<float>());
  s.view.data = s.bytes.data_ptr<uint8_t>();
  s.view.format = format;
  s.view.rows = out;
  s.view.cols = in;
  if (format.is_scaled()) {
    const bool per_row = format.scaling == casting::Scaling::kPerRow;
    s.view.scales = {s.scales.data_ptr<float>(), per_row ? 1 : out, in,
                     per_row ? out : 1, 1};
  }
  return s;
}

void StorageProducts(int rounds) {
  struct Case {
    const char* storage;
    at::ScalarType compute;
  };
  const Case cases[] = {{"F32", at::kFloat},
                        {"BF16", at::kBFloat16},
                        {"BF16", at::kFloat},
                        {"F8_E4M3FN:per_row", at::kFloat},
                        {"F8_E5M2:per_tensor", at::kFloat}};
  const Shape shapes[] = {{"Llama-1B gate", 0, 2048, 8192},
                          {"Llama-1B down", 0, 8192, 2048}};
  const models::ProductIsa best = models::BestProductIsa();
  // With AMX, the avx512_bf16 kernels (what the CPU runs without tiles)
  // beside it.
  const bool with_bf16 = best == models::ProductIsa::kAmxBf16;
  std::printf(
      "\ncompute from storage: the fused product with the best kernels (%s) "
      "and with the avx512 kernels (each weight widened to f32, one FMA per "
      "weight and row), vs decode-to-compute-copy + product, and the product "
      "on a resident weight of the compute dtype (median us of %d, all "
      "interleaved; GB/s = stored weight bytes / fused time; with amx_bf16 "
      "best, bf16 us = the avx512_bf16 kernels')\n"
      "%-15s %-20s %-5s %4s %10s %10s %10s %10s %8s %8s %8s %8s %10s\n",
      std::string(models::ProductIsaName(best)).c_str(), rounds, "shape",
      "storage", "comp", "rows", "fused us", "avx512 us", "copy us", "resident",
      "512/fu", "copy/fu", "GB/s", "512 GB/s", "bf16 us");
  for (const Shape& shape : shapes) {
    const at::Tensor w = at::randn({shape.out, shape.in}) * 0.02;
    for (const Case& c : cases) {
      const casting::StorageFormat format =
          *casting::StorageFormat::Parse(c.storage);
      const StoredWeight stored = Store(w, format);
      const at::Tensor resident = w.to(c.compute);
      const casting::ElementType compute = c.compute == at::kFloat
                                               ? casting::ElementType::kF32
                                               : casting::ElementType::kBF16;
      at::Tensor copy = at::empty({shape.out, shape.in}, c.compute);
      casting::CodecOptions codec;
      codec.max_threads = at::get_num_threads();
      for (int64_t rows : {1, 2, 4, 8, 16, 32, 64}) {
        const at::Tensor x = at::randn({rows, shape.in}).to(c.compute);
        auto fused = [&] {
          (void)models::StorageProduct(x, stored.view, at::Tensor());
        };
        auto wide = [&] {
          (void)models::StorageProduct(x, stored.view, at::Tensor(),
                                       std::nullopt,
                                       models::ProductIsa::kAvx512);
        };
        auto decoded = [&] {
          (void)casting::Decode(format, stored.bytes.data_ptr(),
                                stored.scales.data_ptr<float>(), w.numel(),
                                shape.out, compute, copy.data_ptr(), codec);
          models::LinearProduct(x, copy, at::Tensor());
        };
        auto on_resident = [&] {
          models::LinearProduct(x, resident, at::Tensor());
        };
        auto narrow = [&] {
          (void)models::StorageProduct(x, stored.view, at::Tensor(),
                                       std::nullopt,
                                       models::ProductIsa::kAvx512Bf16);
        };
        std::vector<std::function<void()>> fns = {fused, wide, decoded,
                                                  on_resident};
        if (with_bf16) fns.push_back(narrow);
        const std::vector<double> us = CompareAll(fns, rounds);
        std::printf(
            "%-15s %-20s %-5s %4ld %10.0f %10.0f %10.0f %10.0f %8.2f %8.2f "
            "%8.1f %8.1f %10.0f\n",
            shape.what, c.storage, c.compute == at::kFloat ? "f32" : "bf16",
            static_cast<long>(rows), us[0], us[1], us[2], us[3], us[1] / us[0],
            us[2] / us[0], stored.view.size_bytes() / (us[0] * 1e3),
            stored.view.size_bytes() / (us[1] * 1e3), with_bf16 ? us[4] : 0.0);
      }
    }
  }
}

int Run(int threads, int rounds, bool only_storage) {
  at::set_num_threads(threads);
  c10::InferenceMode inference;
  models::SetF32MatmulKernel(models::F32MatmulKernel::kAuto);
  const models::F32MatmulChoice choice = models::ResolveF32MatmulKernel();
  std::printf(
      "threads %d; --cpu-f32-matmul=auto here chooses %s (probe: blas %.0f "
      "us, onednn %.0f us); bf16 on oneDNN with fused activations: %s\n",
      threads, models::F32MatmulKernelName(choice.kernel).c_str(),
      choice.blas_us, choice.onednn_us,
      models::OneDnnRunsReducedPrecision() ? "yes" : "no");
  std::printf(
      "product kernels: %s\n",
      std::string(models::ProductIsaName(models::BestProductIsa())).c_str());
  if (!only_storage) {
    F32Kernels(rounds);
    FusedActivation(at::kFloat, "f32 (oneDNN)", rounds);
    FusedActivation(at::kBFloat16, "bf16", rounds);
  }
  StorageProducts(rounds);
  return 0;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  int threads = 1, rounds = 15;
  bool only_storage = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::max(1, std::atoi(argv[i] + 10));
    } else if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::max(1, std::atoi(argv[i] + 9));
    } else if (std::strcmp(argv[i], "--only=storage") == 0) {
      only_storage = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads=N] [--rounds=N] [--only=storage]\n",
                   argv[0]);
      return 2;
    }
  }
  return castserve::Run(threads, rounds, only_storage);
}
