#include "models/generation/kv_block_pool.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "models/model.h"

namespace castserve::models {

namespace {

// The hash of a block's key: its parent's prefix id and its token ids
// (splitmix64's finalizer over each word).
uint64_t KeyHash(int64_t parent, absl::Span<const int64_t> tokens) {
  auto mix = [](uint64_t h, uint64_t word) {
    h ^= word + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
  };
  uint64_t h = mix(0, static_cast<uint64_t>(parent));
  for (int64_t token : tokens) h = mix(h, static_cast<uint64_t>(token));
  return h;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvBlockPool>> KvBlockPool::Create(
    const KvCacheShape& shape, int64_t block_tokens, int64_t pool_bytes,
    bool prefix_caching) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.head_dim <= 0 ||
      block_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV block pool needs positive sizes; got ", shape.layers,
                     " layers, ", shape.kv_heads, " kv heads, head_dim ",
                     shape.head_dim, ", ", block_tokens, " tokens per block"));
  }
  const int64_t element =
      static_cast<int64_t>(shape.options.dtype().itemsize());
  const int64_t block_bytes = 2 * shape.layers * shape.kv_heads * block_tokens *
                              shape.head_dim * element;
  if (pool_bytes < block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a KV pool of ", pool_bytes, " bytes cannot hold one block of ",
        block_tokens, " tokens (", block_bytes, " bytes)"));
  }
  return std::unique_ptr<KvBlockPool>(
      new KvBlockPool(shape, block_tokens, block_bytes,
                      pool_bytes / block_bytes, prefix_caching));
}

absl::StatusOr<int64_t> KvBlockPool::Take() {
  if (free_blocks() <= 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the KV pool's ", capacity_blocks_, " blocks are all in use"));
  }
  int64_t index = -1;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else if (!released_.empty() ||
             static_cast<int64_t>(blocks_.size()) < capacity_blocks_) {
    absl::StatusOr<int64_t> allocated = Allocate();
    if (!allocated.ok()) return allocated.status();
    index = *allocated;
  } else {
    index = Evict();
    TORCH_INTERNAL_ASSERT(index >= 0, "KV pool: no block free, new or cached");
  }
  AddHolder(index);
  return index;
}

absl::StatusOr<int64_t> KvBlockPool::Allocate() {
  at::Tensor block;
  absl::Status allocated = CatchExceptions([&]() -> absl::Status {
    block = at::empty(
        {shape_.layers, 2, shape_.kv_heads, block_tokens_, shape_.head_dim},
        shape_.options);
    return absl::OkStatus();
  });
  if (!allocated.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a KV block: ", allocated.message()));
  }
  int64_t index;
  if (released_.empty()) {
    index = static_cast<int64_t>(blocks_.size());
    blocks_.push_back(std::move(block));
    states_.emplace_back();
  } else {
    index = released_.back();
    released_.pop_back();
    blocks_[index] = std::move(block);
  }
  allocated_blocks_.fetch_add(1, std::memory_order_relaxed);
  return index;
}

int64_t KvBlockPool::ReleaseUnheld() {
  for (int64_t block = Evict(); block >= 0; block = Evict()) {
    free_.push_back(block);
  }
  const int64_t freed = static_cast<int64_t>(free_.size());
  for (int64_t block : free_) {
    blocks_[block].reset();
    released_.push_back(block);
  }
  free_.clear();
  allocated_blocks_.fetch_sub(freed, std::memory_order_relaxed);
  return freed * block_bytes_;
}

void KvBlockPool::AddHolder(int64_t block) {
  BlockState& state = states_[block];
  if (state.holders++ > 0) return;
  if (state.id != kNoPrefix) {
    cached_.erase(state.lru);
    cached_blocks_.fetch_sub(1, std::memory_order_relaxed);
  }
  const int64_t in_use =
      in_use_blocks_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (in_use > peak_blocks_.load(std::memory_order_relaxed)) {
    peak_blocks_.store(in_use, std::memory_order_relaxed);
  }
}

void KvBlockPool::Give(int64_t block) {
  BlockState& state = states_[block];
  TORCH_INTERNAL_ASSERT(state.holders > 0, "KV block ", block, " is not held");
  if (--state.holders > 0) return;
  in_use_blocks_.fetch_sub(1, std::memory_order_relaxed);
  if (state.id == kNoPrefix) {
    free_.push_back(block);
    return;
  }
  state.lru = cached_.insert(cached_.end(), block);
  cached_blocks_.fetch_add(1, std::memory_order_relaxed);
}

int64_t KvBlockPool::Evict() {
  if (cached_.empty()) return -1;
  const int64_t block = cached_.front();
  cached_.pop_front();
  cached_blocks_.fetch_sub(1, std::memory_order_relaxed);
  BlockState& state = states_[block];
  auto [first, last] = published_.equal_range(state.hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == block) {
      published_.erase(it);
      break;
    }
  }
  // Blocks published after it keep its id as their parent: no block will
  // match them again (ids are never reused), and they age out in turn.
  state.id = kNoPrefix;
  state.tokens.clear();
  return block;
}

int64_t KvBlockPool::FindCached(int64_t parent,
                                absl::Span<const int64_t> tokens) const {
  if (!prefix_caching_) return -1;
  auto [first, last] = published_.equal_range(KeyHash(parent, tokens));
  for (auto it = first; it != last; ++it) {
    const BlockState& state = states_[it->second];
    if (state.parent == parent && absl::MakeConstSpan(state.tokens) == tokens) {
      return it->second;
    }
  }
  return -1;
}

void KvBlockPool::Share(int64_t block) {
  TORCH_INTERNAL_ASSERT(states_[block].id != kNoPrefix,
                        "only a published KV block is shared");
  AddHolder(block);
}

int64_t KvBlockPool::Publish(int64_t block, int64_t parent,
                             absl::Span<const int64_t> tokens) {
  if (!prefix_caching_) return kNoPrefix;
  TORCH_INTERNAL_ASSERT(states_[block].holders > 0 &&
                        states_[block].id == kNoPrefix &&
                        static_cast<int64_t>(tokens.size()) == block_tokens_);
  const int64_t equal = FindCached(parent, tokens);
  if (equal >= 0) return states_[equal].id;
  BlockState& state = states_[block];
  state.id = next_prefix_id_++;
  state.parent = parent;
  state.hash = KeyHash(parent, tokens);
  state.tokens.assign(tokens.begin(), tokens.end());
  published_.emplace(state.hash, block);
  return state.id;
}

at::Tensor KvBlockPool::keys(int64_t index, int64_t layer) const {
  return blocks_[index][layer][0];
}

at::Tensor KvBlockPool::values(int64_t index, int64_t layer) const {
  return blocks_[index][layer][1];
}

const void* KvBlockPool::keys_data(int64_t index, int64_t layer) const {
  const at::Tensor& block = blocks_[index];
  return static_cast<const uint8_t*>(block.const_data_ptr()) +
         layer * block.stride(0) * block.element_size();
}

const void* KvBlockPool::values_data(int64_t index, int64_t layer) const {
  const at::Tensor& block = blocks_[index];
  return static_cast<const uint8_t*>(block.const_data_ptr()) +
         (layer * block.stride(0) + block.stride(1)) * block.element_size();
}

PagedKvCache::~PagedKvCache() { Release(); }

absl::Status PagedKvCache::Reserve(int64_t tokens) {
  while (capacity() < tokens) {
    absl::StatusOr<int64_t> block = pool_.Take();
    if (!block.ok()) return block.status();
    blocks_.push_back(*block);
  }
  return absl::OkStatus();
}

void PagedKvCache::Release() {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool_.Give(*it);
  blocks_.clear();
  length_ = 0;
  published_blocks_ = 0;
  prefix_id_ = KvBlockPool::kNoPrefix;
}

int64_t PagedKvCache::ReuseCachedPrefix(absl::Span<const int64_t> tokens) {
  TORCH_INTERNAL_ASSERT(blocks_.empty(), "prefix reuse on a non-empty cache");
  const int64_t block_tokens = pool_.block_tokens();
  const int64_t whole = static_cast<int64_t>(tokens.size()) / block_tokens;
  for (int64_t i = 0; i < whole; ++i) {
    const int64_t block = pool_.FindCached(
        prefix_id_, tokens.subspan(i * block_tokens, block_tokens));
    if (block < 0) break;
    pool_.Share(block);
    blocks_.push_back(block);
    prefix_id_ = pool_.PrefixIdOf(block);
  }
  published_blocks_ = static_cast<int64_t>(blocks_.size());
  length_ = published_blocks_ * block_tokens;
  return length_;
}

void PagedKvCache::PublishFullBlocks(absl::Span<const int64_t> tokens) {
  if (!pool_.prefix_caching()) return;
  const int64_t block_tokens = pool_.block_tokens();
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(tokens.size()) >= length_);
  for (; published_blocks_ < length_ / block_tokens; ++published_blocks_) {
    prefix_id_ = pool_.Publish(
        blocks_[published_blocks_], prefix_id_,
        tokens.subspan(published_blocks_ * block_tokens, block_tokens));
  }
}

std::pair<at::Tensor, at::Tensor> PagedKvCache::Append(
    int64_t layer, const at::Tensor& keys, const at::Tensor& values) {
  Write(layer, keys, values);
  const int64_t end = length_ + keys.size(2);
  return {Gather(layer, /*keys=*/true, end),
          Gather(layer, /*keys=*/false, end)};
}

void PagedKvCache::Write(int64_t layer, const at::Tensor& keys,
                         const at::Tensor& values) {
  TORCH_CHECK(layer >= 0 && layer < pool_.layers(), "KV cache layer ", layer,
              " out of range");
  const int64_t n = keys.size(2);
  const int64_t end = length_ + n;
  TORCH_CHECK(end <= capacity(), "KV blocks of ", capacity(),
              " tokens cannot take ", n, " more after ", length_);
  const int64_t block_tokens = pool_.block_tokens();
  for (int64_t position = length_; position < end;) {
    const int64_t block = blocks_[position / block_tokens];
    const int64_t offset = position % block_tokens;
    const int64_t count = std::min(block_tokens - offset, end - position);
    const int64_t source = position - length_;
    pool_.keys(block, layer)
        .narrow(1, offset, count)
        .copy_(keys[0].narrow(1, source, count));
    pool_.values(block, layer)
        .narrow(1, offset, count)
        .copy_(values[0].narrow(1, source, count));
    position += count;
  }
}

PagedKvBlocks PagedKvCache::Blocks(int64_t layer, int64_t end) const {
  TORCH_INTERNAL_ASSERT(pool_.reads_in_place() && end <= capacity());
  PagedKvBlocks blocks;
  const int64_t used = pool_.BlocksFor(end);
  blocks.keys.reserve(used);
  blocks.values.reserve(used);
  for (int64_t i = 0; i < used; ++i) {
    blocks.keys.push_back(pool_.keys_data(blocks_[i], layer));
    blocks.values.push_back(pool_.values_data(blocks_[i], layer));
  }
  blocks.tokens = end;
  blocks.block_tokens = pool_.block_tokens();
  blocks.dtype = pool_.dtype();
  return blocks;
}

at::Tensor PagedKvCache::Gather(int64_t layer, bool keys, int64_t end) const {
  const int64_t used = pool_.BlocksFor(end);
  std::vector<at::Tensor> parts;
  parts.reserve(used);
  for (int64_t i = 0; i < used; ++i) {
    parts.push_back(keys ? pool_.keys(blocks_[i], layer)
                         : pool_.values(blocks_[i], layer));
  }
  // One block: a view, no copy.
  at::Tensor all = used == 1 ? parts[0] : at::cat(parts, /*dim=*/1);
  return all.narrow(1, 0, end).unsqueeze(0);
}

void PagedKvCache::Advance(int64_t n) {
  TORCH_CHECK(n >= 0 && length_ + n <= capacity(), "KV blocks of ", capacity(),
              " tokens cannot advance by ", n, " after ", length_);
  length_ += n;
}

}  // namespace castserve::models
