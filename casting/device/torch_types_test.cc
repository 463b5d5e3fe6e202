#include "casting/device/torch_types.h"

#include <optional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

// Every LibTorch name in the table is one LibTorch has, and resolves to it.
TEST(TorchTypesTest, EveryTorchNameResolves) {
  for (const DtypeRow& row : AllDtypeRows()) {
    const std::optional<c10::ScalarType> type = TorchScalarType(row.dtype);
    EXPECT_EQ(type.has_value(), !row.torch_name.empty()) << row.torch_name;
    if (type.has_value()) {
      EXPECT_EQ(c10::toString(*type), row.torch_name);
    }
  }
}

// torch_types.h's former switch: fp8 lives in uint8 tensors.
TEST(TorchTypesTest, ElementTypesMapAsBefore) {
  EXPECT_EQ(TorchScalarType(ElementType::kF32), c10::kFloat);
  EXPECT_EQ(TorchScalarType(ElementType::kF16), c10::kHalf);
  EXPECT_EQ(TorchScalarType(ElementType::kBF16), c10::kBFloat16);
  EXPECT_EQ(TorchScalarType(ElementType::kF8E4M3FN), c10::kByte);
  EXPECT_EQ(TorchScalarType(ElementType::kF8E5M2), c10::kByte);
}

// weight.cc's former pass-through switch: integer and bool checkpoint
// tensors and their LibTorch types; the unsigned wide ones have none.
TEST(TorchTypesTest, IntegerDTypesMapAsBefore) {
  EXPECT_EQ(TorchScalarType(DType::kBool), c10::kBool);
  EXPECT_EQ(TorchScalarType(DType::kU8), c10::kByte);
  EXPECT_EQ(TorchScalarType(DType::kI8), c10::kChar);
  EXPECT_EQ(TorchScalarType(DType::kI16), c10::kShort);
  EXPECT_EQ(TorchScalarType(DType::kI32), c10::kInt);
  EXPECT_EQ(TorchScalarType(DType::kI64), c10::kLong);
  EXPECT_FALSE(TorchScalarType(DType::kU16).has_value());
  EXPECT_FALSE(TorchScalarType(DType::kU32).has_value());
  EXPECT_FALSE(TorchScalarType(DType::kU64).has_value());
  EXPECT_FALSE(TorchScalarType(DType::kBytes).has_value());
  EXPECT_FALSE(TorchScalarType(DType::kC64).has_value());
}

// tensor_conversion.cc's former table, read from LibTorch's side: each
// LibTorch dtype finds the row of its wire name; kByte is UINT8, not fp8.
TEST(TorchTypesTest, FindByTorchScalarTypeGivesTheFormerWireNames) {
  const std::vector<std::pair<c10::ScalarType, absl::string_view>> expected = {
      {c10::kBool, "BOOL"},     {c10::kByte, "UINT8"}, {c10::kChar, "INT8"},
      {c10::kShort, "INT16"},   {c10::kInt, "INT32"},  {c10::kLong, "INT64"},
      {c10::kHalf, "FP16"},     {c10::kFloat, "FP32"}, {c10::kDouble, "FP64"},
      {c10::kBFloat16, "BF16"},
  };
  for (const auto& [type, wire] : expected) {
    const DtypeRow* row = FindByTorchScalarType(type);
    ASSERT_NE(row, nullptr) << c10::toString(type);
    EXPECT_EQ(row->wire_name, wire);
  }
  EXPECT_EQ(FindByTorchScalarType(c10::kComplexFloat), nullptr);
  EXPECT_EQ(FindByTorchScalarType(c10::kQInt8), nullptr);
}

TEST(TorchTypesTest, DevicesRoundTripThroughLibTorch) {
  EXPECT_EQ(TorchDevice(Device::Cpu()), c10::Device(c10::kCPU));
  EXPECT_EQ(TorchDevice(Device::Cuda(2)), c10::Device(c10::kCUDA, 2));
  for (const Device& device :
       {Device::Cpu(), Device::Cuda(0), Device::Cuda(5)}) {
    EXPECT_EQ(DeviceOf(TorchDevice(device)), device) << device.name();
  }
  EXPECT_EQ(DeviceOf(c10::Device(c10::kCUDA)), Device::Cuda(0));
  EXPECT_EQ(DeviceOf(c10::Device(c10::kMeta)), std::nullopt);
}

}  // namespace
}  // namespace castserve::casting
