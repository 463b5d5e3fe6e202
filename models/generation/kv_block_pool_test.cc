#include "models/generation/kv_block_pool.h"

#include <ATen/ATen.h>

#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace castserve::models
