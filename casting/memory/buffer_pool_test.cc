#include "casting/memory/buffer_pool.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "casting/memory/tracking_allocator.h"

namespace castserve::casting {
namespace {

TEST(BufferPoolTest, KeepsTwoBuffersPerShapeByDefault) {
  BufferPool pool;
  for (int i = 0; i < 3; ++i) pool.Give(at::empty({100}));
  EXPECT_EQ(pool.idle_bytes(), 800);
}

TEST(BufferPoolTest, AFreedBufferServesTheNextTakeOfTheSameSize) {
  BufferPool pool;
  at::Tensor first = pool.Take(at::kFloat, {64, 32});
  void* memory = first.data_ptr();
  pool.Give(std::move(first));
  EXPECT_EQ(pool.idle_bytes(), 64 * 32 * 4);
  // Another shape with the same element count reuses it.
  at::Tensor second = pool.Take(at::kFloat, {32, 64});
  EXPECT_EQ(second.data_ptr(), memory);
  EXPECT_EQ(second.sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_TRUE(second.is_contiguous());
  EXPECT_EQ(pool.reuses(), 1);
  EXPECT_EQ(pool.idle_bytes(), 0);
}

TEST(BufferPoolTest, OtherDtypesAndSizesGetNewMemory) {
  BufferPool pool;
  at::Tensor buffer = pool.Take(at::kFloat, {128});
  pool.Give(std::move(buffer));
  EXPECT_EQ(pool.Take(at::kBFloat16, {128}).scalar_type(), at::kBFloat16);
  EXPECT_EQ(pool.Take(at::kFloat, {129}).numel(), 129);
  EXPECT_EQ(pool.reuses(), 0);
  EXPECT_EQ(pool.idle_bytes(), 128 * 4) << "still idle";
}

TEST(BufferPoolTest, ABufferStillReferencedIsNotReused) {
  BufferPool pool;
  at::Tensor buffer = pool.Take(at::kFloat, {16, 16});
  at::Tensor view = buffer.t();  // Someone still looks at the memory.
  pool.Give(std::move(buffer));
  EXPECT_EQ(pool.idle_bytes(), 0);
  at::Tensor part = at::empty({32}).narrow(0, 0, 16);
  pool.Give(std::move(part));
  EXPECT_EQ(pool.idle_bytes(), 0) << "a part of a larger buffer";
}

TEST(BufferPoolTest, KeepsAtMostTheConfiguredIdleBuffers) {
  BufferPool pool(BufferPool::Options{/*max_idle_per_shape=*/2,
                                      /*max_idle_bytes=*/1000});
  for (int i = 0; i < 3; ++i) pool.Give(at::empty({100}));  // 400 bytes each.
  EXPECT_EQ(pool.idle_bytes(), 800) << "two per shape";
  pool.Give(at::empty({60}));
  EXPECT_EQ(pool.idle_bytes(), 800) << "over max_idle_bytes";
  pool.Give(at::empty({50}));
  EXPECT_EQ(pool.idle_bytes(), 1000);
}

TEST(BufferPoolTest, ReuseAllocatesNothingAndDestroyingThePoolFreesAll) {
  absl::StatusOr<TrackingAllocator*> allocator =
      TrackingAllocator::InstallTrackingCpuAllocator();
  ASSERT_TRUE(allocator.ok());
  const int64_t before = (*allocator)->AllocatedBytes();
  {
    BufferPool pool;
    pool.Give(pool.Take(at::kFloat, {1 << 20}));
    const int64_t pooled = (*allocator)->AllocatedBytes();
    EXPECT_EQ(pooled - before, 4 << 20);
    for (int i = 0; i < 10; ++i) {
      at::Tensor buffer = pool.Take(at::kFloat, {1024, 1024});
      EXPECT_EQ((*allocator)->AllocatedBytes(), pooled);
      pool.Give(std::move(buffer));
    }
    EXPECT_EQ(pool.reuses(), 10);
  }
  EXPECT_EQ((*allocator)->AllocatedBytes(), before);
}

}  // namespace
}  // namespace castserve::casting
