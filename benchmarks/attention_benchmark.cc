// Attention's memory and time at SigLIP-so400m's shape (16 heads, 729
// tokens, head dim 72): castserve's attention (LibTorch's fused
// scaled_dot_product_attention) beside the composed form castserve used
// before LibTorch 2.x (matmul, softmax in f32, matmul), which materializes
// the [batch, heads, tokens, tokens] scores. Peak bytes come from castserve's
// tracking allocator (the same counters the daemon exports); both forms run
// in one process, interleaved, on the same inputs.
//
//   bazel run -c opt //benchmarks:attention_benchmark -- [--threads=N]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "casting/memory/tracking_allocator.h"
#include "models/layers/attention.h"

namespace castserve {
namespace {

// The pre-2.x form: scores materialized, softmax in f32.
at::Tensor ComposedAttention(const at::Tensor& q, const at::Tensor& k,
                             const at::Tensor& v, double scale) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, v);
}

struct Measurement {
  double seconds = 0;
  int64_t peak_increase_bytes = 0;
};

Measurement Measure(const std::function<at::Tensor()>& attend) {
  casting::PeakScope scope;
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = attend();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  scope.Stop();
  return {seconds, scope.peak_increase_bytes()};
}

int Run(int threads) {
  if (!casting::TrackingAllocator::InstallTrackingCpuAllocator().ok()) {
    std::fprintf(stderr, "cannot install the tracking allocator\n");
    return 1;
  }
  if (threads > 0) at::set_num_threads(threads);
  const int64_t heads = 16, tokens = 729, dim = 72;
  const double scale = 1 / std::sqrt(static_cast<double>(dim));
  std::printf(
      "attention at SigLIP-so400m's shape (16 heads x 729 tokens x 72), "
      "%d intra-op threads; MB = 2^20 bytes; best of 3\n",
      at::get_num_threads());
  std::printf("%-6s %-5s | %12s %10s | %12s %10s | %8s %8s\n", "dtype", "batch",
              "composed MB", "ms", "fused MB", "ms", "peak", "time");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t batch : {1, 4, 16}) {
      at::manual_seed(0);
      const auto options = at::TensorOptions().dtype(dtype);
      at::Tensor q = at::randn({batch, heads, tokens, dim}, options);
      at::Tensor k = at::randn({batch, heads, tokens, dim}, options);
      at::Tensor v = at::randn({batch, heads, tokens, dim}, options);
      Measurement composed{1e9, 0}, fused{1e9, 0};
      for (int round = 0; round < 3; ++round) {
        Measurement c =
            Measure([&] { return ComposedAttention(q, k, v, scale); });
        Measurement f = Measure([&] {
          return models::ScaledDotProductAttention(q, k, v, at::Tensor(),
                                                   scale);
        });
        composed = {std::min(composed.seconds, c.seconds),
                    c.peak_increase_bytes};
        fused = {std::min(fused.seconds, f.seconds), f.peak_increase_bytes};
      }
      const double mb = 1 << 20;
      std::printf(
          "%-6s %-5ld | %12.1f %10.1f | %12.1f %10.1f | %7.3fx %7.3fx\n",
          dtype == at::kFloat ? "f32" : "bf16", static_cast<long>(batch),
          composed.peak_increase_bytes / mb, composed.seconds * 1e3,
          fused.peak_increase_bytes / mb, fused.seconds * 1e3,
          static_cast<double>(fused.peak_increase_bytes) /
              composed.peak_increase_bytes,
          fused.seconds / composed.seconds);
    }
  }
  return 0;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      std::fprintf(stderr, "usage: attention_benchmark [--threads=N]\n");
      return 2;
    }
  }
  return castserve::Run(threads);
}
