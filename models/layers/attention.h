// Scaled dot-product attention for castserve's architectures over LibTorch's
// fused kernel: padding masks, causal masks for decoders and grouped-query
// attention.
//
// Shapes use [batch, heads, seq, head_dim] for queries, keys and values.
// Masks are additive biases: 0 where a query may attend, the lowest finite
// value of the scores' dtype where it may not (so a row with every key
// masked attends uniformly instead of producing NaN).
//
// Everything here is a pure function of its arguments: thread-safe.
#ifndef CASTSERVE_MODELS_LAYERS_ATTENTION_H_
#define CASTSERVE_MODELS_LAYERS_ATTENTION_H_

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>

namespace castserve::models {

// The additive bias [batch, 1, query_len, key_len] with `options`' dtype
// and device (the model's: the bias is built there) for a padding
// mask `key_mask` (integer or bool [batch, key_len], nonzero = a real
// token), combined with a causal mask when `causal` (query i, aligned with
// the last query_len keys, sees keys up to its own position). An undefined
// `key_mask` means every key is real. With causal and `sliding_window` > 0
// (Mistral), query i also sees only keys j with i - j < sliding_window.
at::Tensor MakeAttentionBias(const at::Tensor& key_mask, int64_t batch,
                             int64_t query_len, int64_t key_len, bool causal,
                             const at::TensorOptions& options,
                             int64_t sliding_window = 0);

// The additive bias [batch, 1, seq, seq] of bidirectional attention over
// padding mask `key_mask` (integer or bool [batch, seq], nonzero = a real
// token) in a band: query i sees key j only when |i - j| <= `window` and j
// is real (ModernBERT's local layers; window > 0). Dtype and device from
// `options`, masked entries the lowest finite value as above.
at::Tensor MakeBandAttentionBias(const at::Tensor& key_mask, int64_t window,
                                 const at::TensorOptions& options);

// softmax(q k^T * scale + bias) v for q [batch, q_heads, q_len, dim] and
// k, v [batch, kv_heads, k_len, dim] with q_heads a multiple of kv_heads
// (grouped-query attention repeats the kv heads). `bias` is undefined or
// broadcastable to [batch, q_heads, q_len, k_len]; it is applied in q's
// dtype. The fused kernel accumulates in f32 for bf16/f16 inputs and never
// materializes the scores.
// Returns [batch, q_heads, q_len, dim].
at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v,
                                     const at::Tensor& bias, double scale);

// [batch, seq, heads * dim] <-> [batch, heads, seq, dim].
at::Tensor SplitHeads(const at::Tensor& x, int64_t heads);
at::Tensor MergeHeads(const at::Tensor& x);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LAYERS_ATTENTION_H_
