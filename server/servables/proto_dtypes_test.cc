#include "server/servables/proto_dtypes.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "casting/codec/dtype_table.h"
#include "casting/device/torch_types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using casting::ElementType;
using ::testing::HasSubstr;

// Wire names round trip through LibTorch dtypes; those castserve cannot hold
// are refused by name.
TEST(ProtoDtypesTest, WireNamesRoundTripForEveryRow) {
  for (const casting::DtypeRow& row : casting::AllDtypeRows()) {
    if (row.wire_name.empty()) continue;
    absl::StatusOr<at::ScalarType> dtype =
        ScalarTypeFromDatatype(row.wire_name);
    if (!casting::TorchScalarType(row.dtype).has_value()) {
      ASSERT_FALSE(dtype.ok()) << row.wire_name;
      EXPECT_EQ(dtype.status().message(),
                absl::StrCat("datatype ", row.wire_name,
                             " is not supported by castserve (no LibTorch "
                             "dtype)"));
      continue;
    }
    ASSERT_TRUE(dtype.ok()) << dtype.status();
    EXPECT_EQ(*DatatypeName(*dtype), row.wire_name);
  }
  EXPECT_EQ(ScalarTypeFromDatatype("int64").status().message(),
            "unknown datatype 'int64' (datatypes are upper case, e.g. FP32, "
            "INT64)");
  EXPECT_EQ(DatatypeName(at::kComplexFloat).status().code(),
            absl::StatusCode::kInternal);
}

// Every config name of the table is a DataType of model_config.proto, and
// every DataType but TYPE_INVALID is in the table.
TEST(ProtoDtypesTest, ConfigNamesAndTheProtoEnumAgree) {
  for (const casting::DtypeRow& row : casting::AllDtypeRows()) {
    if (row.config_name.empty()) continue;
    inference::DataType type;
    EXPECT_TRUE(inference::DataType_Parse(std::string(row.config_name), &type))
        << row.config_name;
  }
  const google::protobuf::EnumDescriptor* types =
      inference::DataType_descriptor();
  for (int i = 0; i < types->value_count(); ++i) {
    const auto type =
        static_cast<inference::DataType>(types->value(i)->number());
    if (type == inference::TYPE_INVALID) continue;
    EXPECT_TRUE(casting::FindByConfigName(types->value(i)->name()).ok())
        << types->value(i)->name();
  }
}

// tensor_conversion.cc's former table, read both ways.
TEST(ProtoDtypesTest, ConfigDataTypesAreAsBefore) {
  const std::vector<std::pair<at::ScalarType, inference::DataType>> expected = {
      {at::kBool, inference::TYPE_BOOL},
      {at::kByte, inference::TYPE_UINT8},
      {at::kChar, inference::TYPE_INT8},
      {at::kShort, inference::TYPE_INT16},
      {at::kInt, inference::TYPE_INT32},
      {at::kLong, inference::TYPE_INT64},
      {at::kHalf, inference::TYPE_FP16},
      {at::kFloat, inference::TYPE_FP32},
      {at::kDouble, inference::TYPE_FP64},
      {at::kBFloat16, inference::TYPE_BF16},
  };
  for (const auto& [dtype, type] : expected) {
    EXPECT_EQ(ConfigDataType(dtype), type) << c10::toString(dtype);
    EXPECT_EQ(*ScalarTypeFromConfig(type), dtype) << c10::toString(dtype);
  }
  EXPECT_EQ(ConfigDataType(at::kComplexFloat), inference::TYPE_INVALID);
}

TEST(ProtoDtypesTest, ConfigTypesCastserveCannotHoldAreRefused) {
  EXPECT_EQ(ScalarTypeFromConfig(inference::TYPE_INVALID).status().message(),
            "data type 0 is not valid");
  EXPECT_EQ(ScalarTypeFromConfig(inference::TYPE_UINT16).status().message(),
            "datatype UINT16 is not supported by castserve (no LibTorch "
            "dtype)");
  EXPECT_THAT(ScalarTypeFromConfig(inference::TYPE_STRING).status().message(),
              HasSubstr("datatype BYTES is not supported"));
  EXPECT_EQ(ScalarTypeFromConfig(static_cast<inference::DataType>(99))
                .status()
                .message(),
            "data type 99 is not valid");
}

// hf_served_model_factory.cc's former switches.
TEST(ProtoDtypesTest, WeightPolicyEnumsAreAsBefore) {
  EXPECT_EQ(*ComputeElementType(inference::COMPUTE_DTYPE_UNSPECIFIED),
            ElementType::kF32);
  EXPECT_EQ(*ComputeElementType(inference::COMPUTE_DTYPE_F32),
            ElementType::kF32);
  EXPECT_EQ(*ComputeElementType(inference::COMPUTE_DTYPE_F16),
            ElementType::kF16);
  EXPECT_EQ(*ComputeElementType(inference::COMPUTE_DTYPE_BF16),
            ElementType::kBF16);
  EXPECT_EQ(*StorageElementType(inference::STORAGE_DTYPE_F32),
            ElementType::kF32);
  EXPECT_EQ(*StorageElementType(inference::STORAGE_DTYPE_F16),
            ElementType::kF16);
  EXPECT_EQ(*StorageElementType(inference::STORAGE_DTYPE_BF16),
            ElementType::kBF16);
  EXPECT_EQ(*StorageElementType(inference::STORAGE_DTYPE_F8_E4M3FN),
            ElementType::kF8E4M3FN);
  EXPECT_EQ(*StorageElementType(inference::STORAGE_DTYPE_F8_E5M2),
            ElementType::kF8E5M2);
  EXPECT_EQ(*ScalingFromConfig(inference::SCALING_NONE),
            casting::Scaling::kNone);
  EXPECT_EQ(*ScalingFromConfig(inference::SCALING_PER_TENSOR),
            casting::Scaling::kPerTensor);
  EXPECT_EQ(*ScalingFromConfig(inference::SCALING_PER_ROW),
            casting::Scaling::kPerRow);
}

// Every value of the proto enums names a row's element (so a new proto value
// without a row, or with a misspelt name, fails here).
TEST(ProtoDtypesTest, EveryProtoElementEnumValueHasARow) {
  const google::protobuf::EnumDescriptor* storage =
      inference::StorageDtype_descriptor();
  for (int i = 0; i < storage->value_count(); ++i) {
    const auto value =
        static_cast<inference::StorageDtype>(storage->value(i)->number());
    if (value == inference::STORAGE_DTYPE_UNSPECIFIED) continue;
    EXPECT_TRUE(StorageElementType(value).ok()) << storage->value(i)->name();
  }
  const google::protobuf::EnumDescriptor* compute =
      inference::ComputeDtype_descriptor();
  for (int i = 0; i < compute->value_count(); ++i) {
    const auto value =
        static_cast<inference::ComputeDtype>(compute->value(i)->number());
    absl::StatusOr<ElementType> element = ComputeElementType(value);
    ASSERT_TRUE(element.ok()) << compute->value(i)->name();
    EXPECT_TRUE(casting::IsComputeType(*element));
  }
}

TEST(ProtoDtypesTest, UnknownEnumNumbersAreRefusedByNumber) {
  EXPECT_EQ(ComputeElementType(static_cast<inference::ComputeDtype>(42))
                .status()
                .message(),
            "unknown compute_dtype 42");
  EXPECT_EQ(StorageElementType(inference::STORAGE_DTYPE_UNSPECIFIED)
                .status()
                .message(),
            "unknown storage_dtype 0");
  EXPECT_EQ(StorageElementType(static_cast<inference::StorageDtype>(42))
                .status()
                .message(),
            "unknown storage_dtype 42");
  EXPECT_EQ(
      ScalingFromConfig(static_cast<inference::Scaling>(7)).status().message(),
      "unknown scaling 7");
}

}  // namespace
}  // namespace castserve
