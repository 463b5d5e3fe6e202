// Attention per decode step over the KV block pool, before and after paged
// attention: `--sequences` sequences of `--cached` cached tokens each, one
// new token each, Llama-1B's heads (32 query heads over 8 kv heads of 64),
// blocks of 16 tokens, f32 and bf16 blocks. Per layer and step, interleaved
// in one process on the same blocks:
//
//   gather   the path before (and still off the CPU): PagedKvCache::Append
//            writes the new token and gathers each sequence's blocks into a
//            contiguous copy, then the fused kernel per sequence
//   paged    Write, then PagedAttention reading the blocks in place
//   contig   the fused kernel over contiguous per-sequence caches (the
//            attention alone, no pool: the floor the gather was measured
//            against)
//
//   bazel build -c opt //benchmarks:paged_attention_benchmark
//   bazel-bin/benchmarks/paged_attention_benchmark [--threads=1]
//       [--sequences=16] [--cached=512] [--rounds=20]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "c10/core/InferenceMode.h"
#include "models/generation/kv_block_pool.h"
#include "models/kernels/paged_attention.h"
#include "models/layers/attention.h"

namespace castserve {
namespace {

constexpr int64_t kQHeads = 32, kKvHeads = 8, kHeadDim = 64, kBlock = 16;

double Seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void RunDtype(at::ScalarType dtype, int64_t sequences, int64_t cached,
              int rounds) {
  const auto options = at::TensorOptions().dtype(dtype);
  models::KvCacheShape shape{1, kKvHeads, kHeadDim, options};
  const int64_t block_bytes = 2 * kKvHeads * kBlock * kHeadDim *
                              static_cast<int64_t>(at::elementSize(dtype));
  const int64_t blocks = sequences * ((cached + 1 + kBlock) / kBlock + 1);
  auto pool = *models::KvBlockPool::Create(shape, kBlock, blocks * block_bytes);
  std::vector<std::unique_ptr<models::PagedKvCache>> caches;
  std::vector<at::Tensor> contig_k, contig_v;
  for (int64_t s = 0; s < sequences; ++s) {
    caches.push_back(std::make_unique<models::PagedKvCache>(*pool));
    (void)caches.back()->Reserve(cached + 1);
    at::Tensor k = at::randn({1, kKvHeads, cached + 1, kHeadDim}, options);
    at::Tensor v = at::randn({1, kKvHeads, cached + 1, kHeadDim}, options);
    caches.back()->Write(0, k.narrow(2, 0, cached), v.narrow(2, 0, cached));
    caches.back()->Advance(cached);
    contig_k.push_back(k);
    contig_v.push_back(v);
  }
  // Sequences take blocks in turn in a real pool: interleave them.
  at::Tensor q = at::randn({1, kQHeads, sequences, kHeadDim}, options);
  at::Tensor new_k = at::randn({1, kKvHeads, sequences, kHeadDim}, options);
  at::Tensor new_v = at::randn({1, kKvHeads, sequences, kHeadDim}, options);
  const double scale = 1 / std::sqrt(static_cast<double>(kHeadDim));
  at::Tensor bias = models::MakeAttentionBias(at::Tensor(), 1, 1, cached + 1,
                                              /*causal=*/true, options);
  auto gather = [&] {
    std::vector<at::Tensor> parts;
    for (int64_t s = 0; s < sequences; ++s) {
      auto [keys, values] =
          caches[s]->Append(0, new_k.narrow(2, s, 1), new_v.narrow(2, s, 1));
      parts.push_back(models::ScaledDotProductAttention(q.narrow(2, s, 1), keys,
                                                        values, bias, scale));
    }
    (void)at::cat(parts, 2);
  };
  auto paged = [&] {
    std::vector<models::PagedQueries> queries;
    for (int64_t s = 0; s < sequences; ++s) {
      caches[s]->Write(0, new_k.narrow(2, s, 1), new_v.narrow(2, s, 1));
      queries.push_back({caches[s]->Blocks(0, cached + 1), s, 1});
    }
    models::PagedAttentionOptions paged_options;
    paged_options.kv_heads = kKvHeads;
    paged_options.scale = scale;
    (void)models::PagedAttention(q, queries, paged_options).to(dtype);
  };
  auto contig = [&] {
    std::vector<at::Tensor> parts;
    for (int64_t s = 0; s < sequences; ++s) {
      contig_k[s].narrow(2, cached, 1).copy_(new_k.narrow(2, s, 1));
      contig_v[s].narrow(2, cached, 1).copy_(new_v.narrow(2, s, 1));
      parts.push_back(models::ScaledDotProductAttention(
          q.narrow(2, s, 1), contig_k[s], contig_v[s], bias, scale));
    }
    (void)at::cat(parts, 2);
  };
  std::vector<double> g, p, c;
  for (int round = 0; round < rounds + 2; ++round) {
    const double tg = Seconds(gather), tp = Seconds(paged),
                 tc = Seconds(contig);
    if (round < 2) continue;  // Warm-up.
    g.push_back(tg);
    p.push_back(tp);
    c.push_back(tc);
  }
  const double mg = Median(g), mp = Median(p), mc = Median(c);
  std::printf("%-5s | %9.3f | %9.3f | %9.3f | %7.2fx | %7.2fx | %7.2fx\n",
              dtype == at::kFloat ? "f32" : "bf16", mg * 1e3, mp * 1e3,
              mc * 1e3, mg / mp, mg / mc, mp / mc);
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  int threads = 1, rounds = 20;
  int64_t sequences = 16, cached = 512;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--sequences=", 12) == 0) {
      sequences = std::atoll(argv[i] + 12);
    } else if (std::strncmp(argv[i], "--cached=", 9) == 0) {
      cached = std::atoll(argv[i] + 9);
    } else if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr,
                   "usage: paged_attention_benchmark [--threads=N] "
                   "[--sequences=N] [--cached=N] [--rounds=N]\n");
      return 2;
    }
  }
  if (threads < 1 || sequences < 1 || cached < 1 || rounds < 1) {
    std::fprintf(stderr, "every flag must be >= 1\n");
    return 2;
  }
  at::set_num_threads(threads);
  c10::InferenceMode inference_mode;
  std::printf(
      "attention of one decode step, one layer: %lld sequences x %lld cached "
      "tokens + 1, 32 q heads / 8 kv heads x 64, blocks of 16, %d "
      "thread(s), kernel %s; median of %d rounds, ms\n",
      static_cast<long long>(sequences), static_cast<long long>(cached),
      threads,
      std::string(castserve::models::PagedAttentionKernelName()).c_str(),
      rounds);
  std::printf("%-5s | %9s | %9s | %9s | %8s | %8s | %8s\n", "dtype", "gather",
              "paged", "contig", "g/paged", "g/contig", "p/contig");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    castserve::RunDtype(dtype, sequences, cached, rounds);
  }
  return 0;
}
