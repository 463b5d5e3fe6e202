// KV-cache memory shared by the sequences of one model: a pool of blocks,
// each holding `block_tokens` tokens of keys and values for every layer, at
// most `pool_bytes` in all (rounded down to whole blocks). A block's memory
// is allocated on the model's device (in its compute dtype) the first time
// it is needed, on the thread that takes it, so that a casting
// ScopedModelTag on that thread attributes it to the model (CPU tracking
// allocator, device ledger); a block given back stays allocated in the pool
// for the next sequence until ReleaseUnheld frees every block no sequence
// holds (a model demoted to its cool tier keeps no KV memory it does not
// use). in_use_bytes() counts the blocks sequences hold (a block shared by
// several sequences once).
//
// Automatic prefix caching (with `prefix_caching`): a sequence publishes its
// full blocks, each keyed by its token ids and the prefix before it (the
// published block the sequence's previous block equals: its prefix id, a
// number never reused). The key's hash finds candidates; a match compares
// the parent's prefix id and every token, never the hash alone. A new
// sequence shares the published blocks of its longest cached prefix
// (reference-counted) instead of computing them. A published block that no
// sequence holds stays in the pool with its keys and values (cached_bytes;
// it counts in the pool's bytes like any block) and is evicted, least
// recently released first, when a sequence needs a block and neither a
// free nor a not yet allocated one is left.
//
// PagedKvCache is one sequence's view over the blocks it holds: a
// SequenceKv whose Write puts the new tokens into their blocks. On the CPU
// (blocks in f32, bf16 or f16) attention reads the blocks where they lie
// through Blocks (models/kernels/paged_attention.h); elsewhere (CUDA) Append
// gathers the layer's blocks into contiguous keys and values for the fused
// attention call (a copy that lives for the layer's step; measured on the
// CPU at about 2x the attention alone, which is why the CPU does not).
//
// Thread safety: everything but the byte counters is called by one thread
// at a time (the scheduler's step thread); the counters may be read from
// any thread.
#ifndef CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_
#define CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/generation/kv_cache.h"
#include "models/kernels/paged_attention.h"

namespace castserve::models {

class KvBlockPool {
 public:
  // InvalidArgument for a shape with a non-positive size, block_tokens <= 0,
  // or pool_bytes below one block.
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(
      const KvCacheShape& shape, int64_t block_tokens, int64_t pool_bytes,
      bool prefix_caching = false);

  // The prefix id of "no block before": a sequence's first block's parent.
  static constexpr int64_t kNoPrefix = -1;

  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  int64_t block_tokens() const { return block_tokens_; }
  // 2 * layers * kv_heads * block_tokens * head_dim * element size.
  int64_t block_bytes() const { return block_bytes_; }
  int64_t capacity_blocks() const { return capacity_blocks_; }
  int64_t capacity_bytes() const { return capacity_blocks_ * block_bytes_; }
  // Blocks not held by a sequence (free, cached or not allocated yet).
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
  // Bytes of the published blocks no sequence holds (reusable, evictable).
  int64_t cached_bytes() const {
    return cached_blocks_.load(std::memory_order_relaxed) * block_bytes_;
  }

  // A block for a sequence, held once: a free one, else a newly allocated
  // one, else the least recently released cached one (evicted).
  // RESOURCE_EXHAUSTED when every block is held or the allocation fails.
  absl::StatusOr<int64_t> Take();
  // Frees the memory of every block no sequence holds: the free ones and
  // the cached ones (unpublished first: their prefixes are computed again).
  // The blocks sequences hold stay as they are; the capacity too (a block
  // freed is allocated again when next taken). Returns the bytes freed.
  int64_t ReleaseUnheld();
  // Drops one hold of `block` (from Take or Share). Without holders it goes
  // back to the pool: cached (most recently released) if published, else
  // free.
  void Give(int64_t block);

  bool prefix_caching() const { return prefix_caching_; }
  // The published block after prefix `parent` holding exactly `tokens`
  // (block_tokens ids), or -1. Never with prefix caching off.
  int64_t FindCached(int64_t parent, absl::Span<const int64_t> tokens) const;
  // One more hold of a published block (held or cached).
  void Share(int64_t block);
  // Publishes `block` (held, full) as the block after prefix `parent`
  // holding `tokens`, and returns the prefix id the sequence's next block
  // continues: this block's new id, or that of an equal block published
  // before (this one then stays unpublished). With prefix caching off,
  // publishes nothing and returns kNoPrefix.
  int64_t Publish(int64_t block, int64_t parent,
                  absl::Span<const int64_t> tokens);
  // The prefix id of a published block.
  int64_t PrefixIdOf(int64_t block) const { return states_[block].id; }

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
  // Per allocated block: its holders and, once published, its key.
  struct BlockState {
    int64_t holders = 0;
    int64_t id = kNoPrefix;  // Its prefix id when published.
    int64_t parent = kNoPrefix;
    uint64_t hash = 0;
    std::vector<int64_t> tokens;
    std::list<int64_t>::iterator lru;  // In cached_ (published, no holder).
  };

  KvBlockPool(const KvCacheShape& shape, int64_t block_tokens,
              int64_t block_bytes, int64_t capacity_blocks, bool prefix_caching)
      : shape_(shape),
        block_tokens_(block_tokens),
        block_bytes_(block_bytes),
        capacity_blocks_(capacity_blocks),
        prefix_caching_(prefix_caching),
        reads_in_place_(shape.options.device().is_cpu() &&
                        PagedAttentionSupports(dtype())) {}

  const KvCacheShape shape_;
  const int64_t block_tokens_;
  const int64_t block_bytes_;
  const int64_t capacity_blocks_;
  void AddHolder(int64_t block);
  // The oldest cached block, unpublished; -1 when none is cached.
  int64_t Evict();
  // Allocates a block's memory, in a slot ReleaseUnheld freed if any, else
  // in a new one, and returns its index. RESOURCE_EXHAUSTED when the
  // allocation fails.
  absl::StatusOr<int64_t> Allocate();

  const bool prefix_caching_;
  const bool reads_in_place_;
  // Per block ever allocated: [layers, 2, kv_heads, block_tokens,
  // head_dim]; undefined while ReleaseUnheld has freed it.
  std::vector<at::Tensor> blocks_;
  std::vector<BlockState> states_;
  std::vector<int64_t> free_;      // Unpublished blocks no sequence holds.
  std::vector<int64_t> released_;  // Blocks whose memory was freed.
  // Published blocks no sequence holds, least recently released first.
  std::list<int64_t> cached_;
  // Published blocks by the hash of their key (candidates, compared).
  std::unordered_multimap<uint64_t, int64_t> published_;
  int64_t next_prefix_id_ = 0;
  std::atomic<int64_t> cached_blocks_{0};
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
  // Gives every block back (the last first, so that a prefix's later
  // blocks are evicted before its earlier ones); the cache is empty again.
  void Release();

  // Prefix caching. On an empty cache: shares the published blocks of the
  // longest cached prefix of `tokens` in whole blocks and returns its
  // length (0 with prefix caching off); length() is that many tokens.
  // Callers pass all but a prompt's last token, so that one is computed.
  int64_t ReuseCachedPrefix(absl::Span<const int64_t> tokens);
  // Publishes the full blocks not published yet; `tokens` are the ids of
  // positions 0..length()-1 at least.
  void PublishFullBlocks(absl::Span<const int64_t> tokens);

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
  int64_t published_blocks_ = 0;  // Leading blocks published (or reused).
  // The prefix id the next published block continues.
  int64_t prefix_id_ = KvBlockPool::kNoPrefix;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_KV_BLOCK_POOL_H_
