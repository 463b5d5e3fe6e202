#include "casting/device/device.h"

#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

TEST(DeviceTest, DefaultIsCpu) {
  EXPECT_TRUE(Device().is_cpu());
  EXPECT_EQ(Device(), Device::Cpu());
  EXPECT_EQ(Device().name(), "cpu");
}

TEST(DeviceTest, ParsesCpuAndCuda) {
  EXPECT_EQ(*Device::Parse("cpu"), Device::Cpu());
  EXPECT_EQ(*Device::Parse("cuda"), Device::Cuda(0));
  EXPECT_EQ(*Device::Parse("cuda:0"), Device::Cuda(0));
  absl::StatusOr<Device> third = Device::Parse("cuda:3");
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->is_cuda());
  EXPECT_EQ(third->index(), 3);
}

TEST(DeviceTest, NameRoundTrips) {
  for (const Device& device :
       {Device::Cpu(), Device::Cuda(0), Device::Cuda(7), Device::Cuda(1023)}) {
    EXPECT_EQ(*Device::Parse(device.name()), device) << device.name();
  }
  EXPECT_EQ(Device::Cuda(12).name(), "cuda:12");
}

TEST(DeviceTest, EqualityComparesKindAndIndex) {
  EXPECT_NE(Device::Cuda(0), Device::Cuda(1));
  EXPECT_NE(Device::Cpu(), Device::Cuda(0));
}

TEST(DeviceTest, RejectsOtherNames) {
  for (const char* name :
       {"", "CPU", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:01024",
        "cuda:1024", "cuda:99999", " cpu", "mps", "cuda:0:1"}) {
    absl::StatusOr<Device> device = Device::Parse(name);
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
}

}  // namespace
}  // namespace castserve::casting
