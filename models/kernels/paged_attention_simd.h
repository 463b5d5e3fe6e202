// Internal to models/kernels/paged_attention.h: the paged-attention loop,
// written once over an "ops" type V that supplies lanes of f32 (the scalar
// reference is V with one lane):
//
//   static constexpr int kLanes;
//   using Vec;                                   // kLanes f32 values
//   static Vec Zero(); static Vec Set(float);
//   static Vec Load(const float* p); static void Store(float* p, Vec v);
//   template <ElementType T> static Vec LoadKv(const uint8_t* p);
//   static Vec Fma(Vec a, Vec b, Vec acc);       // a * b + acc
//   static Vec Max(Vec a, Vec b);
//   static Vec Exp(Vec x);                       // x <= 0
//   static float Sum(Vec v); static float MaxOf(Vec v);
//
// Per query row and kv head: the scores of the row's query heads (up to 4
// at a time, so each key row is read once for them) against every key it
// sees, block by block through the block table; a softmax in f32 (max, exp,
// sum); then the weighted sum of the value rows, again read in place.
// Two passes over the keys and values of a row, no contiguous copy.
//
// Included only by the per-ISA .cc files, each compiled with its own -m
// flags; everything has internal linkage.
#ifndef CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_SIMD_H_
#define CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_SIMD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec.h"
#include "casting/codec/element_loads.h"
#include "casting/codec/storage_format.h"
#include "models/kernels/paged_attention_kernels.h"

namespace castserve::models::internal {
namespace {

using casting::ElementType;

template <ElementType kType>
float ScalarKv(const uint8_t* src) {
  if constexpr (kType == ElementType::kF32) {
    float value;
    std::memcpy(&value, src, 4);
    return value;
  } else {
    return casting::ElementBitsToF32(kType,
                                     casting::internal::LoadBits<kType>(src));
  }
}

// scores[r * stride] = q[r] . k for the kRows query rows.
template <class V, ElementType kKv, int kRows>
void ScoreTile(const float* const* q, int64_t dim, const uint8_t* k,
               float* scores, int64_t stride) {
  using Vec = typename V::Vec;
  constexpr int64_t kBytes = casting::ElementSizeBytes(kKv);
  Vec acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = V::Zero();
  int64_t c = 0;
  for (; c + V::kLanes <= dim; c += V::kLanes) {
    const Vec key = V::template LoadKv<kKv>(k + c * kBytes);
    for (int r = 0; r < kRows; ++r)
      acc[r] = V::Fma(V::Load(q[r] + c), key, acc[r]);
  }
  float tail[kRows] = {};
  for (; c < dim; ++c) {
    const float key = ScalarKv<kKv>(k + c * kBytes);
    for (int r = 0; r < kRows; ++r) tail[r] += q[r][c] * key;
  }
  for (int r = 0; r < kRows; ++r) scores[r * stride] = V::Sum(acc[r]) + tail[r];
}

// out[r] += weights[r * stride] * v for the kRows output rows.
template <class V, ElementType kKv, int kRows>
void AccumulateTile(const float* weights, int64_t stride, int64_t dim,
                    const uint8_t* v, float* const* out) {
  using Vec = typename V::Vec;
  constexpr int64_t kBytes = casting::ElementSizeBytes(kKv);
  Vec w[kRows];
  for (int r = 0; r < kRows; ++r) w[r] = V::Set(weights[r * stride]);
  int64_t c = 0;
  for (; c + V::kLanes <= dim; c += V::kLanes) {
    const Vec value = V::template LoadKv<kKv>(v + c * kBytes);
    for (int r = 0; r < kRows; ++r) {
      V::Store(out[r] + c, V::Fma(w[r], value, V::Load(out[r] + c)));
    }
  }
  for (; c < dim; ++c) {
    const float value = ScalarKv<kKv>(v + c * kBytes);
    for (int r = 0; r < kRows; ++r) out[r][c] += weights[r * stride] * value;
  }
}

// Calls tile<kRows>() for kRows = rows (1..4).
template <template <int> class Tile, class... Args>
void ForRows(int rows, Args&&... args) {
  switch (rows) {
    case 1:
      return Tile<1>::Run(args...);
    case 2:
      return Tile<2>::Run(args...);
    case 3:
      return Tile<3>::Run(args...);
    default:
      return Tile<4>::Run(args...);
  }
}

template <class V, ElementType kKv>
struct Rows {
  template <int kRows>
  struct Score {
    static void Run(const float* const* q, int64_t dim, const uint8_t* k,
                    float* scores, int64_t stride) {
      ScoreTile<V, kKv, kRows>(q, dim, k, scores, stride);
    }
  };
  template <int kRows>
  struct Accumulate {
    static void Run(const float* weights, int64_t stride, int64_t dim,
                    const uint8_t* v, float* const* out) {
      AccumulateTile<V, kKv, kRows>(weights, stride, dim, v, out);
    }
  };
};

// Scales (and soft-caps) `n` scores, then turns them into exp(s - max);
// returns their sum.
template <class V>
float SoftmaxNumerators(float* s, int64_t n, float scale, float softcap) {
  using Vec = typename V::Vec;
  for (int64_t t = 0; t < n; ++t) {
    s[t] *= scale;
    if (softcap > 0) s[t] = softcap * std::tanh(s[t] / softcap);
  }
  float max = s[0];
  int64_t t = 0;
  if (n >= V::kLanes) {
    Vec m = V::Load(s);
    for (t = V::kLanes; t + V::kLanes <= n; t += V::kLanes) {
      m = V::Max(m, V::Load(s + t));
    }
    max = V::MaxOf(m);
  }
  for (; t < n; ++t) max = std::max(max, s[t]);
  const Vec shift = V::Set(max);
  Vec sum = V::Zero();
  for (t = 0; t + V::kLanes <= n; t += V::kLanes) {
    const Vec e = V::Exp(V::Fma(V::Set(-1.0f), shift, V::Load(s + t)));
    V::Store(s + t, e);
    sum = V::Fma(V::Set(1.0f), e, sum);
  }
  float total = V::Sum(sum);
  for (; t < n; ++t) {
    s[t] = std::exp(s[t] - max);
    total += s[t];
  }
  return total;
}

template <class V, ElementType kKv>
void PagedAttentionLoop(const PagedAttentionShape& shape, const PagedKvRef& kv,
                        int64_t kv_head, const float* q, float* out,
                        int64_t head_stride, int64_t queries, float* scratch) {
  constexpr int64_t kBytes = casting::ElementSizeBytes(kKv);
  const int64_t group = shape.q_heads / shape.kv_heads;
  const int64_t dim = shape.head_dim, block = shape.block_tokens;
  const int64_t row_bytes = dim * kBytes;
  const int64_t head_bytes = kv_head * block * row_bytes;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t position = kv.tokens - queries + i;
    const int64_t first =
        shape.sliding_window > 0
            ? std::max<int64_t>(0, position - shape.sliding_window + 1)
            : 0;
    const int64_t seen = position + 1 - first;
    for (int64_t g0 = 0; g0 < group; g0 += 4) {
      const int rows = static_cast<int>(std::min<int64_t>(4, group - g0));
      const float* q_rows[4];
      float* out_rows[4];
      for (int r = 0; r < rows; ++r) {
        const int64_t head = kv_head * group + g0 + r;
        q_rows[r] = q + head * head_stride + i * dim;
        out_rows[r] = out + head * head_stride + i * dim;
      }
      // scratch[r * seen + t - first]: row r's score of key t.
      for (int64_t t = first; t <= position; ++t) {
        const uint8_t* key =
            kv.key_blocks[t / block] + head_bytes + (t % block) * row_bytes;
        ForRows<Rows<V, kKv>::template Score>(rows, q_rows, dim, key,
                                              scratch + (t - first), seen);
      }
      float inverse_sums[4];
      for (int r = 0; r < rows; ++r) {
        inverse_sums[r] =
            1.0f / SoftmaxNumerators<V>(scratch + r * seen, seen, shape.scale,
                                        shape.softcap);
        std::fill(out_rows[r], out_rows[r] + dim, 0.0f);
      }
      for (int64_t t = first; t <= position; ++t) {
        const uint8_t* value =
            kv.value_blocks[t / block] + head_bytes + (t % block) * row_bytes;
        ForRows<Rows<V, kKv>::template Accumulate>(rows, scratch + (t - first),
                                                   seen, dim, value, out_rows);
      }
      for (int r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < dim; ++c) out_rows[r][c] *= inverse_sums[r];
      }
    }
  }
}

// The loop for `element` (kF32, kBF16, kF16), else null.
template <class V>
PagedAttentionFn PagedAttentionFor(ElementType element) {
  switch (element) {
    case ElementType::kF32:
      return &PagedAttentionLoop<V, ElementType::kF32>;
    case ElementType::kBF16:
      return &PagedAttentionLoop<V, ElementType::kBF16>;
    case ElementType::kF16:
      return &PagedAttentionLoop<V, ElementType::kF16>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_SIMD_H_
