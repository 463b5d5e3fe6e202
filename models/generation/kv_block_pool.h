// KV-cache memory shared by the sequences of one model: a pool of blocks,
// each holding `block_tokens` tokens of keys and values for every layer, at
// most `pool_bytes` in all (rounded down to whole blocks). A block's memory
// is allocated on the model's device (in its compute dtype) the first time
// it is needed, on the thread that takes it, so that a casting
// ScopedModelTag on that thread attributes it to the model (CPU tracking
// allocator, device ledger); a block given back stays allocated in the pool
// for the next sequence. in_use_bytes() counts the blocks sequences hold.
//
// PagedKvCache is one sequence's view over the blocks it holds: a
// SequenceKv whose Write puts the new tokens into their blocks. On the CPU
// (blocks in f32, bf16 or f16) attention reads the blocks where they lie
// through Blocks (models/kernels/paged_attention.h); elsewhere (CUDA) Append
// gathers the layer's blocks into contiguous keys and values for the fused
// attention call (a copy that lives for the layer's step; measured on the
// CPU at about 2x the attention alone, which is why the CPU does not).
//
// Thread safety: Take and Give are called by one thread at a time (the
// scheduler's step thread); the byte counters may be read from any thread.
#ifndef CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_
#define CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/generation/kv_cache.h"
#include "models/kernels/paged_attention.h"

namespace castserve::models {

class KvBlockPool {
 public:
  // InvalidArgument for a shape with a non-positive size, block_tokens <= 0,
  // or pool_bytes below one block.
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(
      const KvCacheShape& shape, int64_t block_tokens, int64_t pool_bytes);

  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  int64_t block_tokens() const { return block_tokens_; }
  // 2 * layers * kv_heads * block_tokens * head_dim * element size.
  int64_t block_bytes() const { return block_bytes_; }
  int64_t capacity_blocks() const { return capacity_blocks_; }
  int64_t capacity_bytes() const { return capacity_blocks_ * block_bytes_; }
  // Blocks not held by a sequence (allocated or not yet).
  int64_t free_blocks() const {
    return capacity_blocks_ - in_use_blocks_.load(std::memory_order_relaxed);
  }
  // The blocks that `tokens` tokens occupy.
  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + block_tokens_ - 1) / block_tokens_;
  }

  // Bytes of the blocks held by sequences, now and at most since Create.
  int64_t in_use_bytes() const {
    return in_use_blocks_.load(std::memory_order_relaxed) * block_bytes_;
  }
  int64_t peak_bytes() const {
    return peak_blocks_.load(std::memory_order_relaxed) * block_bytes_;
  }
  // Bytes of the blocks allocated so far (held or free in the pool).
  int64_t allocated_bytes() const {
    return allocated_blocks_.load(std::memory_order_relaxed) * block_bytes_;
  }

  // A block for a sequence: a free one, else a newly allocated one.
  // RESOURCE_EXHAUSTED when every block is held or the allocation fails.
  absl::StatusOr<int64_t> Take();
  // Returns a block from Take to the pool.
  void Give(int64_t block);

  // Block `index`'s keys of `layer`: [kv_heads, block_tokens, head_dim]
  // (a view); values likewise.
  at::Tensor keys(int64_t index, int64_t layer) const;
  at::Tensor values(int64_t index, int64_t layer) const;
  int64_t layers() const { return shape_.layers; }
  // Whether paged attention reads the blocks in place: on the CPU, in a
  // dtype it reads.
  bool reads_in_place() const { return reads_in_place_; }
  // The address of keys(index, layer)'s (values') first element.
  const void* keys_data(int64_t index, int64_t layer) const;
  const void* values_data(int64_t index, int64_t layer) const;
  at::ScalarType dtype() const { return shape_.options.dtype().toScalarType(); }

 private:
  KvBlockPool(const KvCacheShape& shape, int64_t block_tokens,
              int64_t block_bytes, int64_t capacity_blocks)
      : shape_(shape),
        block_tokens_(block_tokens),
        block_bytes_(block_bytes),
        capacity_blocks_(capacity_blocks),
        reads_in_place_(shape.options.device().is_cpu() &&
                        PagedAttentionSupports(dtype())) {}

  const KvCacheShape shape_;
  const int64_t block_tokens_;
  const int64_t block_bytes_;
  const int64_t capacity_blocks_;
  const bool reads_in_place_;
  // Per allocated block: [layers, 2, kv_heads, block_tokens, head_dim].
  std::vector<at::Tensor> blocks_;
  std::vector<int64_t> free_;  // Allocated blocks no sequence holds.
  std::atomic<int64_t> in_use_blocks_{0};
  std::atomic<int64_t> peak_blocks_{0};
  std::atomic<int64_t> allocated_blocks_{0};
};

// One sequence's keys and values in blocks of a pool. Not thread-safe (the
// step thread's).
class PagedKvCache : public SequenceKv {
 public:
  // `pool` must outlive the cache.
  explicit PagedKvCache(KvBlockPool& pool) : pool_(pool) {}
  // Release().
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  // Takes blocks until `tokens` tokens fit. RESOURCE_EXHAUSTED when the
  // pool runs out (the blocks taken so far stay held).
  absl::Status Reserve(int64_t tokens);
  // Gives every block back; the cache is empty again.
  void Release();

  int64_t capacity() const {
    return static_cast<int64_t>(blocks_.size()) * pool_.block_tokens();
  }
  int64_t bytes() const {
    return static_cast<int64_t>(blocks_.size()) * pool_.block_bytes();
  }

  // SequenceKv; Append TORCH_CHECKs that Reserve made room for the tokens.
  int64_t length() const override { return length_; }
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer,
                                           const at::Tensor& keys,
                                           const at::Tensor& values) override;
  void Write(int64_t layer, const at::Tensor& keys,
             const at::Tensor& values) override;
  bool ReadsInPlace() const override { return pool_.reads_in_place(); }
  PagedKvBlocks Blocks(int64_t layer, int64_t end) const override;
  void Advance(int64_t n) override;

 private:
  // The sequence's `side` (keys or values of `layer`) at positions 0..end-1,
  // [1, kv_heads, end, head_dim].
  at::Tensor Gather(int64_t layer, bool keys, int64_t end) const;

  KvBlockPool& pool_;
  std::vector<int64_t> blocks_;  // In position order.
  int64_t length_ = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_
