#include "casting/memory/device_model_memory.h"

#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

TEST(DeviceModelMemoryTest, AttributesAllocationsAndFreesToTheTaggedModel) {
  DeviceModelMemory memory;
  memory.Register("a#1");
  memory.Register("b#2");
  memory.OnAllocate("a#1", 0, 0x1000, 512);
  memory.OnAllocate("b#2", 0, 0x2000, 2048);
  memory.OnAllocate("a#1", 0, 0x3000, 256);
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 768);
  EXPECT_EQ(memory.Usage("b#2").live_bytes, 2048);

  memory.OnFree(0, 0x1000);
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 256);
  EXPECT_EQ(memory.Usage("a#1").peak_bytes, 768);
  EXPECT_EQ(memory.Usage("b#2").live_bytes, 2048);
}

TEST(DeviceModelMemoryTest, UntaggedAndUnregisteredAllocationsCountForNobody) {
  DeviceModelMemory memory;
  memory.Register("a#1");
  memory.OnAllocate("", 0, 0x1000, 512);
  memory.OnAllocate("ghost#9", 0, 0x2000, 512);
  memory.OnFree(0, 0x1000);
  memory.OnFree(0, 0x2000);
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 0);
  EXPECT_EQ(memory.Usage("ghost#9").live_bytes, 0);
}

TEST(DeviceModelMemoryTest, SameAddressOnAnotherDeviceIsAnotherBlock) {
  DeviceModelMemory memory;
  memory.Register("a#1");
  memory.Register("b#2");
  memory.OnAllocate("a#1", 0, 0x1000, 100);
  memory.OnAllocate("b#2", 1, 0x1000, 300);
  memory.OnFree(1, 0x1000);
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 100);
  EXPECT_EQ(memory.Usage("b#2").live_bytes, 0);
}

TEST(DeviceModelMemoryTest, WindowPeakRestartsFromLiveBytes) {
  DeviceModelMemory memory;
  memory.Register("a#1");
  memory.OnAllocate("a#1", 0, 0x1000, 1000);
  memory.OnAllocate("a#1", 0, 0x2000, 4000);
  memory.OnFree(0, 0x2000);
  EXPECT_EQ(memory.StartWindow("a#1"), 1000);
  memory.OnAllocate("a#1", 0, 0x3000, 500);
  memory.OnFree(0, 0x3000);
  const DeviceModelUsage usage = memory.Usage("a#1");
  EXPECT_EQ(usage.window_peak_bytes, 1500);
  EXPECT_EQ(usage.peak_bytes, 5000);
  EXPECT_EQ(memory.StartWindow("nobody"), 0);
}

TEST(DeviceModelMemoryTest, UnregisteredModelStopsCountingButFreesMatch) {
  DeviceModelMemory memory;
  memory.Register("a#1");
  memory.OnAllocate("a#1", 0, 0x1000, 100);
  memory.Unregister("a#1");
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 0);
  memory.OnAllocate("a#1", 0, 0x2000, 100);
  memory.OnFree(0, 0x1000);
  memory.OnFree(0, 0x2000);
  memory.Register("a#1");
  EXPECT_EQ(memory.Usage("a#1").live_bytes, 0);
}

}  // namespace
}  // namespace castserve::casting
