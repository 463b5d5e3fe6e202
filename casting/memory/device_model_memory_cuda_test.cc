// Two models on cuda:0, running at the same time on their own threads, one
// of them also allocating on a SideStream (as prefetch does): each model's
// live and peak device bytes are exactly its own tensors' bytes. Skips
// without a CUDA device (or in a build without CUDA).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <thread>

#include "casting/device/side_stream.h"
#include "casting/memory/device_memory.h"
#include "casting/memory/device_model_memory.h"
#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

constexpr int64_t kMiB = 1 << 20;

// `bytes` (a multiple of 2 MiB, which the caching allocator does not round)
// on cuda:0.
at::Tensor DeviceBytes(int64_t bytes) {
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(
                                at::Device(at::kCUDA, 0)));
}

void Register(TrackingAllocator& allocator, const std::string& id) {
  ASSERT_TRUE(allocator.RegisterModel(id).ok());
  DeviceModelMemory::Global().Register(id);
}

TEST(DeviceModelMemoryCudaTest, TwoModelsOnOneGpuHaveTheirOwnPeaks) {
  if (!InstallCudaModelMemoryTracker()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<TrackingAllocator*> allocator =
      TrackingAllocator::InstallTrackingCpuAllocator();
  ASSERT_TRUE(allocator.ok());
  Register(**allocator, "a#gpu");
  Register(**allocator, "b#gpu");
  at::Tensor a_resident;
  at::Tensor b_resident;

  // a: 4 MiB made on its side stream, then 8 MiB transient on its thread.
  std::thread a([&] {
    ScopedModelTag tag("a#gpu");
    SideStream side(Device::Cuda(0));
    side.Run([&] { a_resident = DeviceBytes(4 * kMiB); });
    side.WaitOnCurrentStream();
    DeviceBytes(8 * kMiB);
  });
  // b: 2 MiB resident, then 32 MiB transient.
  std::thread b([&] {
    ScopedModelTag tag("b#gpu");
    b_resident = DeviceBytes(2 * kMiB);
    DeviceBytes(32 * kMiB);
  });
  a.join();
  b.join();

  const DeviceModelUsage a_usage = DeviceModelMemory::Global().Usage("a#gpu");
  const DeviceModelUsage b_usage = DeviceModelMemory::Global().Usage("b#gpu");
  EXPECT_EQ(a_usage.live_bytes, 4 * kMiB);
  EXPECT_EQ(a_usage.peak_bytes, 12 * kMiB);
  EXPECT_EQ(b_usage.live_bytes, 2 * kMiB);
  EXPECT_EQ(b_usage.peak_bytes, 34 * kMiB);

  // Freed on this (untagged) thread: credited back to each model.
  a_resident.reset();
  b_resident.reset();
  EXPECT_EQ(DeviceModelMemory::Global().Usage("a#gpu").live_bytes, 0);
  EXPECT_EQ(DeviceModelMemory::Global().Usage("b#gpu").live_bytes, 0);
  DeviceModelMemory::Global().Unregister("a#gpu");
  DeviceModelMemory::Global().Unregister("b#gpu");
  ASSERT_TRUE((*allocator)->UnregisterModel("a#gpu").ok());
  ASSERT_TRUE((*allocator)->UnregisterModel("b#gpu").ok());
}

TEST(DeviceModelMemoryCudaTest, UntaggedAllocationsCountForNoModel) {
  if (!InstallCudaModelMemoryTracker()) GTEST_SKIP() << "no CUDA device";
  DeviceModelMemory::Global().Register("idle#gpu");
  at::Tensor untagged = DeviceBytes(2 * kMiB);
  EXPECT_EQ(DeviceModelMemory::Global().Usage("idle#gpu").peak_bytes, 0);
  DeviceModelMemory::Global().Unregister("idle#gpu");
}

}  // namespace
}  // namespace castserve::casting
