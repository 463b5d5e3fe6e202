// Paged attention on the CPU: the attention of a step's new query rows over
// keys and values that sit in fixed-size blocks (the KV block pool's,
// models/generation/kv_block_pool.h), read in place through each sequence's
// block table — no contiguous copy of a sequence's keys and values per
// layer and step. For a decode step (one query row per sequence) and for a
// chunk of queries after cached tokens (prefill against cached blocks):
// causal, with grouped-query heads, an optional sliding window and an
// optional tanh soft cap of the scores, as DecoderAttention computes them.
//
// Numerics: scores, softmax and the weighted sum in f32 whatever the blocks'
// dtype (f32, bf16 or f16); the output is f32. Equal to softmax(q k^T *
// scale) v over the gathered keys to f32 rounding, not bit for bit (the
// kernel's own summation order and exp).
//
// Thread safety: a pure function of its arguments (the blocks are only
// read); runs its work items on LibTorch's intra-op pool.
#ifndef CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_H_
#define CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "casting/codec/codec.h"

namespace castserve::models {

// One sequence's keys and values of one layer in blocks: block b holds
// positions b * block_tokens .. as [kv_heads, block_tokens, head_dim],
// contiguous, in `dtype`. `tokens` positions are valid, the step's new ones
// included (written before the call).
struct PagedKvBlocks {
  std::vector<const void*> keys;    // Per block, in position order.
  std::vector<const void*> values;  // Likewise.
  int64_t tokens = 0;
  int64_t block_tokens = 0;
  at::ScalarType dtype = at::kFloat;  // kFloat, kBFloat16 or kHalf.
};

// A sequence of the step: its queries are rows offset..offset+count-1 of
// q's sequence dimension, at positions tokens - count .. tokens - 1.
struct PagedQueries {
  PagedKvBlocks kv;
  int64_t offset = 0;
  int64_t count = 0;
};

struct PagedAttentionOptions {
  int64_t kv_heads = 0;
  double scale = 1;
  double softcap = 0;          // > 0: cap * tanh(score / cap).
  int64_t sliding_window = 0;  // > 0: query at p sees keys p-window+1..p.
  // Unset: casting::BestCodecIsa() (AVX-512, AVX2 or the scalar reference;
  // kPortable is the reference here). An unsupported one is asserted.
  std::optional<casting::CodecIsa> isa;
};

// q: [1, q_heads, total, head_dim] on the CPU, floating; q_heads a multiple
// of kv_heads; every sequence's rows within total, its tokens >= count, its
// blocks covering tokens, one block size and dtype for all (asserted: the
// caller built them). Returns f32
// [1, q_heads, total, head_dim]: each sequence's rows hold its attention;
// rows no sequence names are unspecified.
at::Tensor PagedAttention(const at::Tensor& q,
                          const std::vector<PagedQueries>& sequences,
                          const PagedAttentionOptions& options);

// Whether PagedAttention reads blocks of `dtype`.
bool PagedAttentionSupports(at::ScalarType dtype);

// The kernel family PagedAttention runs without options.isa.
absl::string_view PagedAttentionKernelName();

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_H_
