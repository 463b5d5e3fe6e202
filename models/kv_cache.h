// The key/value cache of one sequence for incremental decoding: for every
// decoder layer, the rotated keys and the values of the tokens seen so far,
// so that a decode step runs only its new token through the layers.
//
// Preallocated to `capacity` tokens when created (per-sequence tensors; a
// block pool shared by sequences is issue 17's next step), in the model's
// compute dtype on its device: bytes() is what the cache holds from
// creation until it is destroyed.
//
// Used by one thread at a time (the sequence's); not thread-safe.
#ifndef CASTSERVE_MODELS_KV_CACHE_H_
#define CASTSERVE_MODELS_KV_CACHE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace castserve::models {

// The shape of a decoder's cache, from its config.
struct KvCacheShape {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // The compute dtype and the device of the model's forward.
  at::TensorOptions options;
};

class KvCache {
 public:
  // InvalidArgument for a non-positive size or capacity; RESOURCE_EXHAUSTED
  // when the tensors cannot be allocated.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(
      const KvCacheShape& shape, int64_t capacity);

  // Tokens cached (committed by Advance).
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  // Bytes held by the keys and values of every layer:
  // 2 * layers * kv_heads * capacity * head_dim * element size.
  int64_t bytes() const;

  // Writes `keys` and `values` ([1, kv_heads, n, head_dim], the step's n
  // new tokens) of `layer` at positions length()..length()+n-1 and returns
  // the layer's keys and values of positions 0..length()+n-1 (views).
  // The positions count once Advance(n) commits them after the last layer.
  // TORCH_CHECK: layer in range, shapes as the cache's, within capacity.
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer,
                                           const at::Tensor& keys,
                                           const at::Tensor& values);
  // Commits the n tokens every layer appended. TORCH_CHECK within capacity.
  void Advance(int64_t n);

 private:
  KvCache(std::vector<at::Tensor> keys, std::vector<at::Tensor> values,
          int64_t capacity)
      : keys_(std::move(keys)),
        values_(std::move(values)),
        capacity_(capacity) {}

  // Per layer, [1, kv_heads, capacity, head_dim].
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
  const int64_t capacity_;
  int64_t length_ = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KV_CACHE_H_
