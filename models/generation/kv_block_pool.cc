#include "models/generation/kv_block_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "models/model.h"

namespace castserve::models {

absl::StatusOr<std::unique_ptr<KvBlockPool>> KvBlockPool::Create(
    const KvCacheShape& shape, int64_t block_tokens, int64_t pool_bytes) {
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
  return std::unique_ptr<KvBlockPool>(new KvBlockPool(
      shape, block_tokens, block_bytes, pool_bytes / block_bytes));
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
  } else {
    absl::Status allocated = CatchExceptions([&]() -> absl::Status {
      blocks_.push_back(at::empty(
          {shape_.layers, 2, shape_.kv_heads, block_tokens_, shape_.head_dim},
          shape_.options));
      return absl::OkStatus();
    });
    if (!allocated.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate a KV block: ", allocated.message()));
    }
    index = static_cast<int64_t>(blocks_.size()) - 1;
    allocated_blocks_.fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t in_use =
      in_use_blocks_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (in_use > peak_blocks_.load(std::memory_order_relaxed)) {
    peak_blocks_.store(in_use, std::memory_order_relaxed);
  }
  return index;
}

void KvBlockPool::Give(int64_t block) {
  free_.push_back(block);
  in_use_blocks_.fetch_sub(1, std::memory_order_relaxed);
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
  for (int64_t block : blocks_) pool_.Give(block);
  blocks_.clear();
  length_ = 0;
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
