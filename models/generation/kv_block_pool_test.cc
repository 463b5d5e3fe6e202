#include "models/generation/kv_block_pool.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"
#include "models/kernels/paged_attention.h"
#include "models/layers/attention.h"

namespace castserve::models {
namespace {

// 2 layers, 2 kv heads, head_dim 4, f32: a block of 4 tokens is
// 2 * 2 * 2 * 4 * 4 * 4 = 512 bytes.
KvCacheShape Shape() {
  return {2, 2, 4, at::TensorOptions().dtype(at::kFloat)};
}

TEST(KvBlockPoolTest, SizesAreWholeBlocks) {
  auto pool = KvBlockPool::Create(Shape(), 4, 512 * 3 + 100);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->block_bytes(), 512);
  EXPECT_EQ((*pool)->capacity_blocks(), 3);
  EXPECT_EQ((*pool)->capacity_bytes(), 1536);
  EXPECT_EQ((*pool)->BlocksFor(1), 1);
  EXPECT_EQ((*pool)->BlocksFor(4), 1);
  EXPECT_EQ((*pool)->BlocksFor(5), 2);
  EXPECT_EQ(KvBlockPool::Create(Shape(), 4, 511).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvBlockPool::Create(Shape(), 0, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvBlockPoolTest, BlocksAreAllocatedWhenFirstTakenAndReused) {
  auto* allocator = *casting::TrackingAllocator::InstallTrackingCpuAllocator();
  auto pool = KvBlockPool::Create(Shape(), 4, 1024);
  ASSERT_TRUE(pool.ok());
  const int64_t before = allocator->AllocatedBytes();
  EXPECT_EQ((*pool)->allocated_bytes(), 0);
  auto a = (*pool)->Take();
  auto b = (*pool)->Take();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(allocator->AllocatedBytes() - before, 1024);
  EXPECT_EQ((*pool)->Take().status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*pool)->in_use_bytes(), 1024);
  (*pool)->Give(*a);
  EXPECT_EQ((*pool)->in_use_bytes(), 512);
  auto again = (*pool)->Take();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);  // Reused, not allocated again.
  EXPECT_EQ((*pool)->allocated_bytes(), 1024);
  EXPECT_EQ(allocator->AllocatedBytes() - before, 1024);
  (*pool)->Give(*again);
  (*pool)->Give(*b);
  EXPECT_EQ((*pool)->in_use_bytes(), 0);
  EXPECT_EQ((*pool)->peak_bytes(), 1024);
}

TEST(PagedKvCacheTest, AppendReturnsEveryPositionAcrossBlocks) {
  auto pool = KvBlockPool::Create(Shape(), 4, 512 * 4);
  ASSERT_TRUE(pool.ok());
  PagedKvCache cache(**pool);
  ASSERT_TRUE(cache.Reserve(6).ok());
  EXPECT_EQ(cache.capacity(), 8);
  EXPECT_EQ(cache.bytes(), 1024);
  at::Tensor k = at::randn({1, 2, 6, 4});
  at::Tensor v = at::randn({1, 2, 6, 4});
  for (int64_t layer = 0; layer < 2; ++layer) {
    auto [keys, values] = cache.Append(layer, k, v);
    EXPECT_TRUE(at::equal(keys, k));
    EXPECT_TRUE(at::equal(values, v));
  }
  cache.Advance(6);
  // Two more tokens cross into the third block once reserved.
  EXPECT_ANY_THROW(cache.Append(0, k, v));
  ASSERT_TRUE(cache.Reserve(12).ok());
  at::Tensor k2 = at::randn({1, 2, 3, 4});
  auto [keys, values] = cache.Append(1, k2, k2);
  EXPECT_TRUE(at::equal(keys, at::cat({k, k2}, 2)));
  EXPECT_TRUE(at::equal(values, at::cat({v, k2}, 2)));
  EXPECT_EQ((*pool)->in_use_bytes(), 3 * 512);
  // The pool runs out: the blocks taken so far stay held.
  EXPECT_EQ(cache.Reserve(20).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*pool)->in_use_bytes(), 4 * 512);
  cache.Release();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ((*pool)->in_use_bytes(), 0);
}

TEST(PagedKvCacheTest, DestructionGivesTheBlocksBack) {
  auto pool = KvBlockPool::Create(Shape(), 4, 512 * 4);
  ASSERT_TRUE(pool.ok());
  {
    PagedKvCache cache(**pool);
    ASSERT_TRUE(cache.Reserve(16).ok());
    EXPECT_EQ((*pool)->free_blocks(), 0);
  }
  EXPECT_EQ((*pool)->free_blocks(), 4);
  EXPECT_EQ((*pool)->in_use_bytes(), 0);
}

// Paged attention over Blocks (the CPU path) against the fused kernel over
// Append's gathered copy (the path off the CPU): 4 query heads over 2 kv
// heads, 3 new tokens after 6 cached ones, across block boundaries.
TEST(PagedKvCacheTest, BlocksReadInPlaceAttendAsTheGatheredCopy) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    KvCacheShape shape = Shape();
    shape.options = shape.options.dtype(dtype);
    auto pool = KvBlockPool::Create(shape, 4, 1 << 20);
    ASSERT_TRUE(pool.ok());
    ASSERT_TRUE((*pool)->reads_in_place());
    PagedKvCache cache(**pool);
    ASSERT_TRUE(cache.ReadsInPlace());
    ASSERT_TRUE(cache.Reserve(9).ok());
    const auto options = at::TensorOptions().dtype(dtype);
    for (int64_t layer = 0; layer < 2; ++layer) {
      cache.Write(layer, at::randn({1, 2, 6, 4}, options),
                  at::randn({1, 2, 6, 4}, options));
    }
    cache.Advance(6);
    at::Tensor k = at::randn({1, 2, 3, 4}, options);
    at::Tensor v = at::randn({1, 2, 3, 4}, options);
    at::Tensor q = at::randn({1, 4, 3, 4}, options);
    auto [keys, values] = cache.Append(1, k, v);
    at::Tensor bias = MakeAttentionBias(at::Tensor(), 1, 3, 9,
                                        /*causal=*/true, options);
    at::Tensor gathered =
        ScaledDotProductAttention(q, keys, values, bias, 0.5).to(at::kFloat);
    PagedAttentionOptions paged_options;
    paged_options.kv_heads = 2;
    paged_options.scale = 0.5;
    at::Tensor paged =
        PagedAttention(q, {{cache.Blocks(1, 9), 0, 3}}, paged_options);
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_LT((paged - gathered).abs().max().item<double>(), tolerance)
        << dtype;
  }
}

TEST(KvBlockPoolTest, OnlyCpuBlocksOfKernelDtypesReadInPlace) {
  KvCacheShape shape = Shape();
  shape.options = shape.options.dtype(at::kDouble);
  auto pool = KvBlockPool::Create(shape, 4, 1 << 20);
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE((*pool)->reads_in_place());
  EXPECT_FALSE(PagedKvCache(**pool).ReadsInPlace());
}

std::unique_ptr<KvBlockPool> CachingPool(int64_t blocks) {
  auto pool = KvBlockPool::Create(Shape(), 4, 512 * blocks,
                                  /*prefix_caching=*/true);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

// Fills `cache` with `tokens.size()` positions (distinct values per
// position and layer) and publishes its full blocks.
void Fill(PagedKvCache& cache, const std::vector<int64_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(cache.Reserve(n).ok());
  for (int64_t layer = 0; layer < 2; ++layer) {
    at::Tensor k = at::randn({1, 2, n, 4});
    cache.Write(layer, k, k + 1);
  }
  cache.Advance(n);
  cache.PublishFullBlocks(tokens);
}

TEST(PrefixCacheTest, ReusesTheBlocksOfTheLongestCachedPrefix) {
  auto pool = CachingPool(8);
  const std::vector<int64_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  PagedKvCache first(*pool);
  Fill(first, tokens);
  EXPECT_EQ(pool->in_use_bytes(), 3 * 512);
  PagedKvCache second(*pool);
  EXPECT_EQ(second.ReuseCachedPrefix(tokens), 8);  // Two whole blocks.
  EXPECT_EQ(second.length(), 8);
  // Shared, not copied: the same memory, counted once.
  EXPECT_EQ(pool->in_use_bytes(), 3 * 512);
  EXPECT_EQ(second.Blocks(1, 8).keys, first.Blocks(1, 8).keys);
  PagedKvCache diverged(*pool);
  EXPECT_EQ(diverged.ReuseCachedPrefix({1, 2, 3, 4, 5, 0, 7, 8, 9}), 4);
  // A block equal to a cached one after a different first block is not a
  // match: the key is the block and everything before it.
  PagedKvCache other_start(*pool);
  EXPECT_EQ(other_start.ReuseCachedPrefix({0, 2, 3, 4, 5, 6, 7, 8, 9}), 0);
  // Shorter than a block: nothing to reuse.
  PagedKvCache short_one(*pool);
  EXPECT_EQ(short_one.ReuseCachedPrefix({1, 2, 3}), 0);
}

TEST(PrefixCacheTest, ReleasedBlocksStayCachedUntilEvictedLeastRecentFirst) {
  auto pool = CachingPool(3);
  {
    PagedKvCache first(*pool);
    Fill(first, {1, 2, 3, 4, 5, 6, 7, 8, 9});  // 2 full blocks + 1.
  }
  EXPECT_EQ(pool->in_use_bytes(), 0);
  EXPECT_EQ(pool->cached_bytes(), 2 * 512);
  EXPECT_EQ(pool->free_blocks(), 3);  // Cached blocks can be taken.
  {
    // Two blocks for another sequence: the free one, then an eviction of
    // the prefix's later block (released first).
    PagedKvCache other(*pool);
    ASSERT_TRUE(other.Reserve(8).ok());
    EXPECT_EQ(pool->cached_bytes(), 512);
    EXPECT_EQ(pool->allocated_bytes(), 3 * 512);  // Nothing beyond the pool.
  }
  PagedKvCache again(*pool);
  EXPECT_EQ(again.ReuseCachedPrefix({1, 2, 3, 4, 5, 6, 7, 8, 9}), 4);
  EXPECT_EQ(pool->cached_bytes(), 0);
  // Under full pressure every cached block goes.
  PagedKvCache big(*pool);
  ASSERT_TRUE(big.Reserve(8).ok());
  EXPECT_EQ(big.Reserve(12).code(), absl::StatusCode::kResourceExhausted);
}

TEST(PrefixCacheTest, AnEqualBlockIsPublishedOnce) {
  auto pool = CachingPool(8);
  const std::vector<int64_t> tokens = {1, 2, 3, 4, 5};
  PagedKvCache a(*pool), b(*pool);
  Fill(a, tokens);
  Fill(b, tokens);  // Computed alongside: its block stays private.
  a.Release();
  b.Release();
  EXPECT_EQ(pool->cached_bytes(), 512);
}

TEST(PrefixCacheTest, OffByDefaultNothingIsCached) {
  auto pool = KvBlockPool::Create(Shape(), 4, 512 * 8);
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE((*pool)->prefix_caching());
  {
    PagedKvCache cache(**pool);
    Fill(cache, {1, 2, 3, 4, 5});
  }
  EXPECT_EQ((*pool)->cached_bytes(), 0);
  PagedKvCache again(**pool);
  EXPECT_EQ(again.ReuseCachedPrefix({1, 2, 3, 4, 5}), 0);
}

TEST(PrefixCacheTest, ReleaseUnheldFreesFreeAndCachedBlocksAndKeepsHeldOnes) {
  auto* allocator = *casting::TrackingAllocator::InstallTrackingCpuAllocator();
  auto pool = CachingPool(6);
  const std::vector<int64_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  PagedKvCache held(*pool);
  Fill(held, tokens);  // 3 blocks held, 2 of them published.
  // Appending nothing returns what the cache holds.
  const at::Tensor none = at::zeros({1, 2, 0, 4});
  const at::Tensor held_keys = held.Append(0, none, none).first.clone();
  {
    PagedKvCache cached(*pool);
    Fill(cached, {20, 21, 22, 23, 24});  // 1 block cached, 1 free after.
  }
  EXPECT_EQ(pool->allocated_bytes(), 5 * 512);
  EXPECT_EQ(pool->cached_bytes(), 512);
  const int64_t before = allocator->AllocatedBytes();

  EXPECT_EQ(pool->ReleaseUnheld(), 2 * 512);
  EXPECT_EQ(pool->allocated_bytes(), 3 * 512);
  EXPECT_EQ(before - allocator->AllocatedBytes(), 2 * 512);
  EXPECT_EQ(pool->cached_bytes(), 0);
  EXPECT_EQ(pool->in_use_bytes(), 3 * 512);
  EXPECT_EQ(pool->free_blocks(), 3);  // The capacity stays.
  // The held blocks keep their keys and their prefix; the released one's
  // prefix is gone.
  EXPECT_TRUE(at::equal(held.Append(0, none, none).first, held_keys));
  PagedKvCache reuse(*pool);
  EXPECT_EQ(reuse.ReuseCachedPrefix(tokens), 8);
  PagedKvCache gone(*pool);
  EXPECT_EQ(gone.ReuseCachedPrefix({20, 21, 22, 23, 24}), 0);

  // Freed blocks are allocated again when taken, up to the capacity.
  PagedKvCache more(*pool);
  ASSERT_TRUE(more.Reserve(12).ok());
  EXPECT_EQ(pool->allocated_bytes(), 6 * 512);
  EXPECT_EQ(allocator->AllocatedBytes() - before, 1 * 512);
  EXPECT_EQ(more.Reserve(16).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->ReleaseUnheld(), 0) << "every block is held";
}

}  // namespace
}  // namespace castserve::models
