#include "casting/device/device_probe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

TEST(DeviceProbeTest, CpuIsAlwaysAvailable) {
  EXPECT_TRUE(CheckDeviceAvailable(Device::Cpu()).ok());
}

TEST(DeviceProbeTest, BuildWithoutCudaSeesNoDevice) {
  if (BuiltWithCuda()) GTEST_SKIP() << "built with --config=cuda";
  EXPECT_EQ(CudaDeviceCount(), 0);
  const absl::Status status = CheckDeviceAvailable(Device::Cuda(0));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("no CUDA device"));
  EXPECT_THAT(status.message(),
              HasSubstr("built without CUDA: bazel build --config=cuda"));
}

TEST(DeviceProbeTest, IndexPastTheVisibleDevicesIsUnavailable) {
  const absl::Status status =
      CheckDeviceAvailable(Device::Cuda(CudaDeviceCount()));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("no CUDA device"));
  EXPECT_THAT(status.message(),
              HasSubstr(Device::Cuda(CudaDeviceCount()).name()));
}

TEST(DeviceProbeTest, VisibleDevicesAreAvailable) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(CheckDeviceAvailable(Device::Cuda(0)).ok());
}

}  // namespace
}  // namespace castserve::casting
