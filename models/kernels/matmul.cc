#include "models/kernels/matmul.h"

#include <ATen/ATen.h>
#include <ATen/cpu/Utils.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"
#include "models/kernels/onednn_ops.h"

namespace castserve::models {
namespace {

// The measurement's product: rows large enough to be past the small-batch
// regime, a weight (4 MiB) that fits in the caches like a layer's slice.
constexpr int64_t kProbeRows = 256;
constexpr int64_t kProbeFeatures = 1024;
constexpr int kProbeRounds = 3;
// oneDNN must be this much faster to replace LibTorch's default.
constexpr double kOneDnnAdvantage = 0.9;

template <typename Fn>
double MicrosecondsOf(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

F32MatmulChoice Measure() {
  F32MatmulChoice choice;
  if (OneDnnLinear() == nullptr) return choice;
  c10::InferenceMode inference;
  // Constant values (timing does not depend on them) so that measuring
  // leaves the global generator where seeded callers expect it.
  const at::Tensor x = at::full({kProbeRows, kProbeFeatures}, 0.5);
  const at::Tensor w = at::full({kProbeFeatures, kProbeFeatures}, 0.5);
  const at::Tensor none;
  at::linear(x, w);  // First calls set up each kernel.
  OneDnnLinearProduct(x, w, none, kNoOneDnnPostOp);
  choice.blas_us = choice.onednn_us = 1e300;
  for (int round = 0; round < kProbeRounds; ++round) {
    choice.blas_us =
        std::min(choice.blas_us, MicrosecondsOf([&] { at::linear(x, w); }));
    choice.onednn_us =
        std::min(choice.onednn_us, MicrosecondsOf([&] {
                   OneDnnLinearProduct(x, w, none, kNoOneDnnPostOp);
                 }));
  }
  choice.measured = true;
  choice.kernel = choice.onednn_us < kOneDnnAdvantage * choice.blas_us
                      ? F32MatmulKernel::kOneDnn
                      : F32MatmulKernel::kBlas;
  return choice;
}

ABSL_CONST_INIT absl::Mutex choice_mutex(absl::kConstInit);
F32MatmulKernel requested ABSL_GUARDED_BY(choice_mutex) =
    F32MatmulKernel::kAuto;
F32MatmulChoice resolved ABSL_GUARDED_BY(choice_mutex);
bool is_resolved ABSL_GUARDED_BY(choice_mutex) = false;
// The hot path's copy of resolved.kernel once is_resolved.
std::atomic<F32MatmulKernel> fast_kernel{F32MatmulKernel::kAuto};

}  // namespace

void SetF32MatmulKernel(F32MatmulKernel kernel) {
  absl::MutexLock lock(&choice_mutex);
  requested = kernel;
  is_resolved = false;
  fast_kernel.store(F32MatmulKernel::kAuto, std::memory_order_release);
}

F32MatmulChoice ResolveF32MatmulKernel() {
  absl::MutexLock lock(&choice_mutex);
  if (!is_resolved) {
    if (requested == F32MatmulKernel::kAuto) {
      resolved = Measure();
    } else {
      resolved = F32MatmulChoice();
      resolved.kernel =
          OneDnnLinear() == nullptr ? F32MatmulKernel::kBlas : requested;
    }
    is_resolved = true;
    fast_kernel.store(resolved.kernel, std::memory_order_release);
  }
  return resolved;
}

bool OneDnnRunsReducedPrecision() {
  static const bool yes = [] {
    const std::unordered_map<std::string, c10::IValue> caps =
        at::cpu::get_cpu_capabilities();
    for (const char* isa : {"avx512_bw", "avx512_vl", "avx512_dq"}) {
      auto it = caps.find(isa);
      if (it == caps.end() || !it->second.isBool() || !it->second.toBool()) {
        return false;
      }
    }
    return true;
  }();
  return yes;
}

namespace {

// True when oneDNN computes this product (see LinearProduct).
bool OnOneDnn(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.device().is_cpu() || x.scalar_type() != weight.scalar_type() ||
      x.dim() < 1 || x.size(-1) == 0 ||
      x.numel() < kOneDnnMinRows * x.size(-1) || OneDnnLinear() == nullptr) {
    return false;
  }
  switch (x.scalar_type()) {
    case at::kFloat: {
      F32MatmulKernel kernel = fast_kernel.load(std::memory_order_acquire);
      if (kernel == F32MatmulKernel::kAuto) {
        kernel = ResolveF32MatmulKernel().kernel;
      }
      return kernel == F32MatmulKernel::kOneDnn;
    }
    case at::kBFloat16:
    case at::kHalf:
      return OneDnnRunsReducedPrecision();
    default:
      return false;
  }
}

}  // namespace

at::Tensor LinearProduct(const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& bias,
                         std::optional<Activation> activation) {
  at::Tensor y;
  if (OnOneDnn(x, weight)) {
    const std::optional<OneDnnPostOp> post_op = OneDnnPostOpOf(activation);
    y = OneDnnLinearProduct(x, weight, bias, post_op.value_or(kNoOneDnnPostOp));
    if (post_op.has_value()) return y;  // Fused, or no activation.
  } else {
    y = at::linear(x, weight, bias);
  }
  return activation.has_value() ? Activate(*activation, y) : y;
}

}  // namespace castserve::models
