#include "casting/codec/dtype_table.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "casting/codec/storage_format.h"
#include "casting/formats/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

// Every name a row has finds that row again in its vocabulary.
TEST(DtypeTableTest, EveryNameOfEveryRowRoundTrips) {
  for (const DtypeRow& row : AllDtypeRows()) {
    SCOPED_TRACE(row.checkpoint_name.empty() ? row.wire_name
                                             : row.checkpoint_name);
    EXPECT_EQ(&RowOf(row.dtype), &row);
    if (!row.checkpoint_name.empty()) {
      EXPECT_EQ(*FindByCheckpointName(row.checkpoint_name), &row);
      EXPECT_EQ(DTypeName(row.dtype), row.checkpoint_name);
      EXPECT_EQ(*DTypeFromName(row.checkpoint_name), row.dtype);
    }
    if (!row.wire_name.empty()) {
      EXPECT_EQ(*FindByWireName(row.wire_name), &row);
    }
    if (!row.config_name.empty()) {
      EXPECT_EQ(*FindByConfigName(row.config_name), &row);
    }
    if (!row.torch_storage_class.empty()) {
      EXPECT_EQ(*FindByTorchStorageClass(row.torch_storage_class), &row);
    }
    if (!row.element.has_value()) continue;
    const ElementType element = *row.element;
    EXPECT_EQ(&RowOf(element), &row);
    EXPECT_EQ(ElementTypeName(element), row.element_name);
    EXPECT_EQ(*ElementTypeFromCanonicalName(row.element_name), element);
    EXPECT_EQ(*ParseElementType(row.element_name), element);
    EXPECT_EQ(*ParseElementType(absl::AsciiStrToLower(row.element_name)),
              element);
    for (absl::string_view alias : row.element_aliases) {
      if (alias.empty()) continue;
      EXPECT_EQ(*ParseElementType(alias), element) << alias;
      EXPECT_EQ(*ParseElementType(absl::AsciiStrToUpper(alias)), element);
    }
    EXPECT_EQ(ElementSizeBytes(element) * 8, row.bits);
  }
}

// Each vocabulary's names are unique, so that a lookup cannot be ambiguous.
TEST(DtypeTableTest, NamesAreUniqueWithinEachVocabulary) {
  const std::vector<absl::string_view DtypeRow::*> columns = {
      &DtypeRow::checkpoint_name, &DtypeRow::wire_name, &DtypeRow::config_name,
      &DtypeRow::torch_storage_class, &DtypeRow::element_name};
  for (absl::string_view DtypeRow::*column : columns) {
    for (const DtypeRow& a : AllDtypeRows()) {
      for (const DtypeRow& b : AllDtypeRows()) {
        if (&a == &b || (a.*column).empty()) continue;
        EXPECT_NE(a.*column, b.*column);
      }
    }
  }
}

TEST(DtypeTableTest, UnknownNamesAreRefusedWithPreciseErrors) {
  absl::StatusOr<const DtypeRow*> row = FindByCheckpointName("F9");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(row.status().message(), "unknown dtype 'F9'");
  // BYTES has no checkpoint name: the empty name is not it.
  EXPECT_EQ(FindByCheckpointName("").status().message(), "unknown dtype ''");

  row = FindByWireName("fp32");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(row.status().message(),
            "unknown datatype 'fp32' (datatypes are upper case, e.g. FP32, "
            "INT64)");

  row = FindByConfigName("FP32");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(row.status().message(), HasSubstr("unknown data type 'FP32'"));

  row = FindByTorchStorageClass("torch.ComplexFloatStorage");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(row.status().message(), HasSubstr("'torch.ComplexFloatStorage'"));

  // The canonical lookup takes no aliases; ParseElementType does.
  absl::StatusOr<ElementType> element = ElementTypeFromCanonicalName("bf16");
  EXPECT_EQ(element.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(element.status().message(),
            "unknown element type \"bf16\"; expected one of: F32, F16, BF16, "
            "F8_E4M3FN, F8_E5M2");
  EXPECT_FALSE(ParseElementType("F8_E8M0").ok());
  EXPECT_FALSE(ParseElementType("").ok());
}

// The answers the checkpoint readers got from checkpoint.cc's former table:
// (safetensors name, bits) for every DType.
TEST(DtypeTableTest, CheckpointNamesAndBitsAreAsBefore) {
  const std::vector<std::pair<absl::string_view, int>> expected = {
      {"BOOL", 8},    {"U8", 8},      {"I8", 8},      {"U16", 16},
      {"I16", 16},    {"U32", 32},    {"I32", 32},    {"U64", 64},
      {"I64", 64},    {"F16", 16},    {"BF16", 16},   {"F32", 32},
      {"F64", 64},    {"C64", 64},    {"F8_E4M3", 8}, {"F8_E5M2", 8},
      {"F8_E8M0", 8}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"F4", 4},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto dtype = static_cast<DType>(i);
    EXPECT_EQ(DTypeName(dtype), expected[i].first);
    EXPECT_EQ(DTypeBits(dtype), expected[i].second);
  }
}

// storage_format's former switches: names, sizes, fp8 ranges, compute types.
TEST(DtypeTableTest, ElementAttributesAreAsBefore) {
  struct Expected {
    ElementType type;
    absl::string_view name;
    int64_t size_bytes;
    bool fp8;
    bool compute;
    float max_finite;
  };
  const Expected expected[] = {
      {ElementType::kF32, "F32", 4, false, true, 0.0f},
      {ElementType::kF16, "F16", 2, false, true, 0.0f},
      {ElementType::kBF16, "BF16", 2, false, true, 0.0f},
      {ElementType::kF8E4M3FN, "F8_E4M3FN", 1, true, false, 448.0f},
      {ElementType::kF8E5M2, "F8_E5M2", 1, true, false, 57344.0f},
  };
  for (const Expected& e : expected) {
    EXPECT_EQ(ElementTypeName(e.type), e.name);
    EXPECT_EQ(ElementSizeBytes(e.type), e.size_bytes) << e.name;
    EXPECT_EQ(IsFp8(e.type), e.fp8) << e.name;
    EXPECT_EQ(IsComputeType(e.type), e.compute) << e.name;
    EXPECT_EQ(Fp8MaxFinite(e.type), e.max_finite) << e.name;
  }
  const auto invalid = static_cast<ElementType>(kNumElementTypes);
  EXPECT_EQ(ElementSizeBytes(invalid), 0);
  EXPECT_FALSE(IsFp8(invalid));
  EXPECT_FALSE(IsComputeType(invalid));
  EXPECT_EQ(ElementTypeName(invalid), "INVALID");
  // weight.cc's former switch: the checkpoint dtypes the codec reads.
  EXPECT_EQ(RowOf(DType::kF8E4M3).element, ElementType::kF8E4M3FN);
  EXPECT_EQ(RowOf(DType::kF8E5M2).element, ElementType::kF8E5M2);
  EXPECT_EQ(RowOf(DType::kF32).element, ElementType::kF32);
  EXPECT_FALSE(RowOf(DType::kF64).element.has_value());
  EXPECT_FALSE(RowOf(DType::kF8E8M0).element.has_value());
  EXPECT_FALSE(RowOf(DType::kI64).element.has_value());
}

// The pickled storage classes state_dict_unpickler.cc used to list.
TEST(DtypeTableTest, TorchStorageClassesAreAsBefore) {
  const std::vector<std::pair<absl::string_view, DType>> expected = {
      {"torch.FloatStorage", DType::kF32},
      {"torch.DoubleStorage", DType::kF64},
      {"torch.HalfStorage", DType::kF16},
      {"torch.BFloat16Storage", DType::kBF16},
      {"torch.LongStorage", DType::kI64},
      {"torch.IntStorage", DType::kI32},
      {"torch.ShortStorage", DType::kI16},
      {"torch.CharStorage", DType::kI8},
      {"torch.ByteStorage", DType::kU8},
      {"torch.BoolStorage", DType::kBool},
  };
  int rows_with_class = 0;
  for (const DtypeRow& row : AllDtypeRows()) {
    rows_with_class += row.torch_storage_class.empty() ? 0 : 1;
  }
  EXPECT_EQ(rows_with_class, static_cast<int>(expected.size()));
  for (const auto& [name, dtype] : expected) {
    EXPECT_EQ((*FindByTorchStorageClass(name))->dtype, dtype) << name;
  }
}

// The KServe datatypes and config names tensor_conversion.cc's former table
// held, plus those it refused (UINT16/32/64, BYTES), which now have rows.
TEST(DtypeTableTest, WireAndConfigNamesAreAsBefore) {
  const std::vector<std::pair<absl::string_view, absl::string_view>> expected =
      {{"BOOL", "TYPE_BOOL"},     {"UINT8", "TYPE_UINT8"},
       {"INT8", "TYPE_INT8"},     {"INT16", "TYPE_INT16"},
       {"INT32", "TYPE_INT32"},   {"INT64", "TYPE_INT64"},
       {"FP16", "TYPE_FP16"},     {"FP32", "TYPE_FP32"},
       {"FP64", "TYPE_FP64"},     {"BF16", "TYPE_BF16"},
       {"UINT16", "TYPE_UINT16"}, {"UINT32", "TYPE_UINT32"},
       {"UINT64", "TYPE_UINT64"}, {"BYTES", "TYPE_STRING"}};
  int rows_with_wire_name = 0;
  for (const DtypeRow& row : AllDtypeRows()) {
    rows_with_wire_name += row.wire_name.empty() ? 0 : 1;
  }
  EXPECT_EQ(rows_with_wire_name, static_cast<int>(expected.size()));
  for (const auto& [wire, config] : expected) {
    EXPECT_EQ((*FindByWireName(wire))->config_name, config) << wire;
  }
}

// The typed-contents fields tensor_conversion.cc's former switch chose.
TEST(DtypeTableTest, WireContentsFieldsAreAsBefore) {
  const std::vector<std::pair<absl::string_view, absl::string_view>> expected =
      {{"BOOL", "bool_contents"},
       {"UINT8", "uint_contents"},
       {"INT8", "int_contents"},
       {"INT16", "int_contents"},
       {"INT32", "int_contents"},
       {"INT64", "int64_contents"},
       {"FP32", "fp32_contents"},
       {"FP64", "fp64_contents"},
       {"FP16", ""},
       {"BF16", ""}};
  for (const auto& [wire, field] : expected) {
    EXPECT_EQ((*FindByWireName(wire))->wire_contents_field, field) << wire;
  }
}

}  // namespace
}  // namespace castserve::casting
