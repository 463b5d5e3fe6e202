// The key/value cache of one sequence for incremental decoding: for every
// decoder layer, the rotated keys and the values of the tokens seen so far,
// so that a decode step runs only its new token through the layers.
//
// KvCache is preallocated to `capacity` tokens when created (per-sequence
// tensors, for DecodeSession; the scheduler's sequences take blocks of a
// shared pool instead: kv_block_pool.h), in the model's
// compute dtype on its device: bytes() is what the cache holds from
// creation until it is destroyed.
//
// Used by one thread at a time (the sequence's); not thread-safe.
#ifndef CASTSERVE_MODELS_GENERATION_KV_CACHE_H_
#define CASTSERVE_MODELS_GENERATION_KV_CACHE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/kernels/paged_attention.h"

namespace castserve::models {

// The shape of a decoder's cache, from its config.
struct KvCacheShape {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // The compute dtype and the device of the model's forward.
  at::TensorOptions options;
};

// The keys and values of one sequence's tokens as a decoder's attention
// uses them, whatever holds them (a preallocated KvCache, or blocks of a
// KvBlockPool through PagedKvCache). Used by one thread at a time.
class SequenceKv {
 public:
  virtual ~SequenceKv() = default;

  // Tokens cached (committed by Advance).
  virtual int64_t length() const = 0;
  // Writes `keys` and `values` ([1, kv_heads, n, head_dim], the step's n
  // new tokens) of `layer` at positions length()..length()+n-1 and returns
  // the layer's keys and values of positions 0..length()+n-1
  // ([1, kv_heads, length()+n, head_dim]). The positions count once
  // Advance(n) commits them after the last layer. TORCH_CHECK: layer in
  // range, shapes as the cache's, room for the n tokens.
  virtual std::pair<at::Tensor, at::Tensor> Append(
      int64_t layer, const at::Tensor& keys, const at::Tensor& values) = 0;
  // Append without returning anything: the caller attends over the step's
  // own keys (nothing cached before) or over Blocks.
  virtual void Write(int64_t layer, const at::Tensor& keys,
                     const at::Tensor& values) = 0;
  // True when Blocks gives the layer's keys and values where they lie, for
  // paged attention (models/kernels/paged_attention.h): blocks on the CPU in
  // a dtype the kernel reads. Otherwise Append's tensors are the way.
  virtual bool ReadsInPlace() const { return false; }
  // With ReadsInPlace (asserted): the blocks of `layer` holding positions
  // 0..end-1 (end <= length() + the tokens written this step).
  virtual PagedKvBlocks Blocks(int64_t layer, int64_t end) const;
  // Commits the n tokens every layer appended. TORCH_CHECK within room.
  virtual void Advance(int64_t n) = 0;
};

class KvCache : public SequenceKv {
 public:
  // InvalidArgument for a non-positive size or capacity; RESOURCE_EXHAUSTED
  // when the tensors cannot be allocated.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(
      const KvCacheShape& shape, int64_t capacity);

  int64_t length() const override { return length_; }
  int64_t capacity() const { return capacity_; }
  // Bytes held by the keys and values of every layer:
  // 2 * layers * kv_heads * capacity * head_dim * element size.
  int64_t bytes() const;

  // SequenceKv; Append returns views of the preallocated tensors.
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer,
                                           const at::Tensor& keys,
                                           const at::Tensor& values) override;
  void Write(int64_t layer, const at::Tensor& keys,
             const at::Tensor& values) override;
  void Advance(int64_t n) override;

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

#endif  // CASTSERVE_MODELS_GENERATION_KV_CACHE_H_
