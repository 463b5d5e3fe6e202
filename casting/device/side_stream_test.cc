#include "casting/device/side_stream.h"

#include <ATen/ATen.h>

#include "casting/device/device_codec.h"
#include "casting/device/device_probe.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

TEST(SideStreamTest, OnTheCpuRunCallsTheWorkAndWaitingIsFree) {
  SideStream stream(Device::Cpu());
  int runs = 0;
  stream.WaitOnCurrentStream();  // Nothing recorded yet.
  stream.Run([&runs] { ++runs; });
  stream.Run([&runs] { ++runs; });
  stream.WaitOnCurrentStream();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(stream.device(), Device::Cpu());
}

TEST(SideStreamTest, TheForwardStreamSeesWorkDoneOnTheSideStream) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device cuda = Device::Cuda(0);
  SideStream stream(cuda);
  at::Tensor made;
  stream.Run([&made, &cuda] {
    made = EmptyOn(cuda, at::kFloat, {1 << 20});
    made.fill_(3.0f);  // Enqueued on the side stream.
  });
  stream.WaitOnCurrentStream();
  RecordOnCurrentStream(made);
  const at::Tensor sum = made.sum();  // On the current (forward) stream.
  EXPECT_EQ(sum.item<float>(), 3.0f * (1 << 20));
}

}  // namespace
}  // namespace castserve::casting
