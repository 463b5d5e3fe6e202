// Checks the CUDA kernels' element conversions without a GPU: the same
// source compiled for the host must match the CPU reference bit for bit.
// Needs nvcc to build (manual target, --config=cuda).
#include "casting/codec/codec_cuda.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "casting/codec/codec.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

constexpr ElementType kNarrowTypes[] = {ElementType::kF16, ElementType::kBF16,
                                        ElementType::kF8E4M3FN,
                                        ElementType::kF8E5M2};

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t NumCodes(ElementType type) {
  return ElementSizeBytes(type) == 1 ? 0x100 : 0x10000;
}

TEST(CodecCudaTest, DeviceDecodeMatchesReferenceForEveryCode) {
  for (ElementType type : kNarrowTypes) {
    for (uint32_t code = 0; code < NumCodes(type); ++code) {
      ASSERT_EQ(Bits(CudaDecodeElementOnHost(type, code)),
                Bits(ElementBitsToF32(type, code)))
          << ElementTypeName(type) << " code 0x" << std::hex << code;
    }
  }
}

// Every representable value, the midpoints and their neighbours, specials
// and random bit patterns.
std::vector<float> EncodeInputs(ElementType type) {
  std::vector<float> inputs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                               -NAN, 1e30f, -1e-40f,  FLT_MAX,   FLT_MIN};
  for (uint32_t code = 0; code + 1 < NumCodes(type); ++code) {
    const float a = ElementBitsToF32(type, code);
    const float b = ElementBitsToF32(type, code + 1);
    inputs.push_back(a);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const float mid = (a + b) / 2;
    inputs.push_back(mid);
    inputs.push_back(std::nextafter(mid, 0.0f));
    inputs.push_back(std::nextafter(mid, INFINITY));
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) inputs.push_back(FromBits(rng()));
  return inputs;
}

TEST(CodecCudaTest, DeviceEncodeMatchesReference) {
  for (ElementType type : kNarrowTypes) {
    for (float value : EncodeInputs(type)) {
      ASSERT_EQ(CudaEncodeElementOnHost(type, value),
                F32ToElementBits(type, value))
          << ElementTypeName(type) << " input " << value << " (0x" << std::hex
          << Bits(value) << ")";
    }
  }
}

TEST(CodecCudaTest, DeviceCountIsZeroOrMoreWithoutCrashing) {
  EXPECT_GE(CudaDeviceCount(), 0);
}

}  // namespace
}  // namespace castserve::casting
