// Internal to models/kernels/paged_attention.h: the per-ISA kernels of
// attention over keys and values held in fixed-size blocks, read in place.
// LibTorch-free: raw pointers and counts, so that each ISA's file compiles
// with its own -m flags.
#ifndef CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_KERNELS_H_
#define CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_KERNELS_H_

#include <cstdint>

#include "casting/codec/storage_format.h"

namespace castserve::models::internal {

// The sizes every sequence of one call shares.
struct PagedAttentionShape {
  // kF32, kBF16 or kF16: the blocks' element type.
  casting::ElementType kv_element = casting::ElementType::kF32;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  // Divides q_heads.
  int64_t head_dim = 0;
  int64_t block_tokens = 0;
  float scale = 1;
  float softcap = 0;           // > 0: cap * tanh(score / cap).
  int64_t sliding_window = 0;  // > 0: a query sees the last `window` keys.
};

// One sequence's keys and values of one layer: block b of the sequence
// holds positions b * block_tokens.. as [kv_heads, block_tokens, head_dim],
// contiguous, at key_blocks[b] and value_blocks[b]; `tokens` positions in
// all (the queries' own included).
struct PagedKvRef {
  const uint8_t* const* key_blocks = nullptr;
  const uint8_t* const* value_blocks = nullptr;
  int64_t tokens = 0;
};

// For the query heads of kv head `kv_head`: `queries` rows at positions
// tokens - queries .. tokens - 1 (causal: row i sees keys 0..its position,
// within the window). Query head h's row i is f32 at
// q + h * head_stride + i * head_dim; the output row goes to the same
// offset from `out`. `scratch` holds ScratchFloats(shape, kv.tokens)
// floats. Writes only the rows of this kv head's query heads.
using PagedAttentionFn = void (*)(const PagedAttentionShape& shape,
                                  const PagedKvRef& kv, int64_t kv_head,
                                  const float* q, float* out,
                                  int64_t head_stride, int64_t queries,
                                  float* scratch);

inline int64_t ScratchFloats(const PagedAttentionShape& shape, int64_t tokens) {
  return (shape.q_heads / shape.kv_heads) * tokens;
}

// The kernel for `element`, or null when the build has no such kernel.
// The CPU check is the caller's.
PagedAttentionFn ReferencePagedAttention(casting::ElementType element);
PagedAttentionFn Avx2PagedAttention(casting::ElementType element);
PagedAttentionFn Avx512PagedAttention(casting::ElementType element);

}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_KERNELS_H_
