#include "casting/device/device_codec.h"

#include <ATen/ATen.h>

#include "casting/device/device_probe.h"
#include "casting/device/torch_types.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

TEST(DeviceCodecTest, CpuDecodeTensorIsTheCpuCodec) {
  const at::Tensor values = at::randn({4, 9}, at::kFloat) * 100;
  const StorageFormat format{ElementType::kF8E4M3FN, Scaling::kPerRow};
  at::Tensor stored = at::empty({36}, at::kByte);
  at::Tensor scales = at::empty({4}, at::kFloat);
  ASSERT_TRUE(Encode(ElementType::kF32, values.data_ptr(), 36, 4, format,
                     stored.data_ptr(), scales.data_ptr<float>())
                  .ok());
  at::Tensor expected = at::empty({4, 9}, at::kBFloat16);
  ASSERT_TRUE(Decode(format, stored.data_ptr(), scales.data_ptr<float>(), 36, 4,
                     ElementType::kBF16, expected.data_ptr())
                  .ok());
  at::Tensor decoded = EmptyOn(Device::Cpu(), at::kBFloat16, {4, 9});
  ASSERT_TRUE(DecodeTensor(format, stored, scales, 4, ElementType::kBF16,
                           decoded, CodecOptions())
                  .ok());
  EXPECT_TRUE(decoded.equal(expected));
}

TEST(DeviceCodecTest, CpuHelpersStayOnTheHost) {
  const at::Tensor tensor = at::ones({3}, at::kFloat);
  EXPECT_TRUE(ToDevice(tensor, Device::Cpu()).is_same(tensor));
  EXPECT_FALSE(HostStaging(Device::Cpu(), at::kFloat, {3}).is_pinned());
  EXPECT_TRUE(EmptyOn(Device::Cpu(), at::kHalf, {2}).is_cpu());
  RecordOnCurrentStream(tensor);  // No-op on the CPU.
  SynchronizeCurrentStream(Device::Cpu());
}

TEST(DeviceCodecTest, CudaDecodeEqualsTheCpuDecode) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device cuda = Device::Cuda(0);
  at::Tensor stored = at::randint(0, 256, {4096}, at::kByte);
  for (ElementType dst :
       {ElementType::kF32, ElementType::kBF16, ElementType::kF16}) {
    const StorageFormat format = StorageFormat::Plain(ElementType::kF8E5M2);
    at::Tensor expected = EmptyOn(Device::Cpu(), TorchScalarType(dst), {4096});
    ASSERT_TRUE(DecodeTensor(format, stored, at::Tensor(), 1, dst, expected,
                             CodecOptions())
                    .ok());
    at::Tensor decoded = EmptyOn(cuda, TorchScalarType(dst), {4096});
    ASSERT_TRUE(DecodeTensor(format, ToDevice(stored, cuda), at::Tensor(), 1,
                             dst, decoded, CodecOptions())
                    .ok());
    SynchronizeCurrentStream(cuda);
    // Bitwise: NaNs compare by their bits.
    EXPECT_TRUE(decoded.cpu().view(at::kByte).equal(expected.view(at::kByte)));
  }
}

TEST(DeviceCodecTest, PinnedStagingReachesTheDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Device cuda = Device::Cuda(0);
  at::Tensor staging = HostStaging(cuda, at::kFloat, {1000});
  EXPECT_TRUE(staging.is_pinned());
  staging.copy_(at::arange(1000, at::kFloat));
  const at::Tensor on_device = ToDevice(staging, cuda);
  EXPECT_TRUE(on_device.is_cuda());
  EXPECT_TRUE(on_device.cpu().equal(staging));
}

}  // namespace
}  // namespace castserve::casting
