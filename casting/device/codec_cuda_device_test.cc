// castserve's CUDA decode kernels, through the device seam (DecodeTensor on
// cuda:0), against the CPU reference codec, bit for bit: every format on all
// 256 fp8 codes (plain, per-row, per-tensor and per-block scaled, into F32,
// F16 and BF16) and a sweep of 2M random codes per format. Reports SKIPPED ("no
// CUDA device") without a device; codec_cuda_test checks the same
// conversions on the host in the CUDA build.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "casting/codec/codec.h"
#include "casting/device/device_codec.h"
#include "casting/device/device_probe.h"
#include "casting/device/torch_types.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

constexpr int64_t kSweepElements = int64_t{2} << 20;

const ElementType kComputeTypes[] = {ElementType::kF32, ElementType::kF16,
                                     ElementType::kBF16};

// Positive scales over many binades, one per row.
at::Tensor RandomScales(int64_t count) {
  return at::exp2(at::rand({count}, at::kFloat) * 40 - 20);
}

// Decodes `stored` ([rows, row_elements] of `format`, as bytes) on the CPU
// with the reference ISA and on cuda:0, and compares the bits.
void ExpectSameBits(StorageFormat format, const at::Tensor& stored,
                    int64_t rows, ElementType dst) {
  const int64_t elements = stored.numel() / format.element_size_bytes();
  at::Tensor scales;
  if (format.scaling == Scaling::kPerRow) scales = RandomScales(rows);
  if (format.scaling == Scaling::kPerTensor) scales = RandomScales(1);
  if (format.scaling == Scaling::kPerBlock) {
    scales = RandomScales(*format.NumScales({rows, elements / rows}));
  }
  CodecOptions reference;
  reference.isa = CodecIsa::kReference;
  at::Tensor expected =
      EmptyOn(Device::Cpu(), TorchScalarType(dst), {elements});
  ASSERT_TRUE(
      DecodeTensor(format, stored, scales, rows, dst, expected, reference)
          .ok());
  const Device cuda = Device::Cuda(0);
  at::Tensor decoded = EmptyOn(cuda, TorchScalarType(dst), {elements});
  ASSERT_TRUE(DecodeTensor(format, ToDevice(stored, cuda),
                           scales.defined() ? ToDevice(scales, cuda) : scales,
                           rows, dst, decoded, CodecOptions())
                  .ok());
  const at::Tensor mismatch =
      decoded.cpu().view(at::kByte).ne(expected.view(at::kByte));
  EXPECT_EQ(mismatch.sum().item<int64_t>(), 0)
      << format.ToString() << " -> " << ElementTypeName(dst);
}

std::vector<StorageFormat> Fp8Formats() {
  std::vector<StorageFormat> formats;
  for (ElementType element : {ElementType::kF8E4M3FN, ElementType::kF8E5M2}) {
    for (Scaling scaling :
         {Scaling::kNone, Scaling::kPerRow, Scaling::kPerTensor}) {
      formats.push_back({element, scaling});
    }
    // Pre-quantized checkpoints' block scales, and ragged 3x5 blocks.
    formats.push_back(StorageFormat::PerBlock(element, 128, 128));
    formats.push_back(StorageFormat::PerBlock(element, 3, 5));
  }
  return formats;
}

TEST(CodecCudaDeviceTest, AllFp8CodesDecodeAsOnTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  // 16 rows of 16: every code once, rows scaled differently.
  const at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
  for (const StorageFormat& format : Fp8Formats()) {
    for (ElementType dst : kComputeTypes) {
      ExpectSameBits(format, codes, /*rows=*/16, dst);
    }
  }
}

TEST(CodecCudaDeviceTest, RandomSweepDecodesAsOnTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(15);
  std::vector<StorageFormat> formats = Fp8Formats();
  for (ElementType plain : kComputeTypes) {
    formats.push_back(StorageFormat::Plain(plain));
  }
  for (const StorageFormat& format : formats) {
    // Random bit patterns: NaNs, infinities and subnormals included.
    const at::Tensor stored = at::randint(
        0, 256, {kSweepElements * format.element_size_bytes()}, at::kByte);
    for (ElementType dst : kComputeTypes) {
      ExpectSameBits(format, stored, /*rows=*/1024, dst);
    }
  }
}

}  // namespace
}  // namespace castserve::casting
