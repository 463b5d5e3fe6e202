#include "casting/codec/storage_format.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

TEST(StorageFormatTest, ToStringAndParseRoundTrip) {
  for (const StorageFormat& format : AllStorageFormats()) {
    absl::StatusOr<StorageFormat> parsed =
        StorageFormat::Parse(format.ToString());
    ASSERT_TRUE(parsed.ok()) << format.ToString() << ": " << parsed.status();
    EXPECT_EQ(*parsed, format) << format.ToString();
  }
}

TEST(StorageFormatTest, ToStringIsCanonical) {
  EXPECT_EQ(StorageFormat::Plain(ElementType::kBF16).ToString(), "BF16");
  EXPECT_EQ(
      (StorageFormat{ElementType::kF8E4M3FN, Scaling::kPerRow}).ToString(),
      "F8_E4M3FN:per_row");
  EXPECT_EQ(
      (StorageFormat{ElementType::kF8E5M2, Scaling::kPerTensor}).ToString(),
      "F8_E5M2:per_tensor");
}

TEST(StorageFormatTest, ParseAcceptsAliasesCaseInsensitively) {
  EXPECT_EQ(StorageFormat::Parse("bfloat16")->element, ElementType::kBF16);
  EXPECT_EQ(StorageFormat::Parse("half")->element, ElementType::kF16);
  EXPECT_EQ(StorageFormat::Parse("float32")->element, ElementType::kF32);
  EXPECT_EQ(StorageFormat::Parse("F8_E4M3")->element, ElementType::kF8E4M3FN);
  EXPECT_EQ(*StorageFormat::Parse("float8_e5m2:PER_ROW"),
            (StorageFormat{ElementType::kF8E5M2, Scaling::kPerRow}));
  EXPECT_EQ(StorageFormat::Parse("fp8_e4m3fn:none")->scaling, Scaling::kNone);
}

TEST(StorageFormatTest, UnknownElementNameGivesPreciseError) {
  absl::StatusOr<StorageFormat> parsed = StorageFormat::Parse("F9_E4M3");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("unknown element type \"F9_E4M3\""));
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("F32, F16, BF16, F8_E4M3FN, F8_E5M2"));
}

TEST(StorageFormatTest, UnknownScalingGivesPreciseError) {
  absl::StatusOr<StorageFormat> parsed =
      StorageFormat::Parse("F8_E5M2:per_column");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("unknown scaling \"per_column\""));
  EXPECT_THAT(parsed.status().message(), HasSubstr("per_tensor, per_row"));
}

TEST(StorageFormatTest, ScalingNeedsFp8Element) {
  absl::StatusOr<StorageFormat> parsed = StorageFormat::Parse("BF16:per_row");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("needs an fp8 element"));
  EXPECT_FALSE(
      (StorageFormat{ElementType::kF16, Scaling::kPerTensor}).Validate().ok());
}

TEST(StorageFormatTest, ElementSizesAndRanges) {
  EXPECT_EQ(ElementSizeBytes(ElementType::kF32), 4);
  EXPECT_EQ(ElementSizeBytes(ElementType::kBF16), 2);
  EXPECT_EQ(ElementSizeBytes(ElementType::kF16), 2);
  EXPECT_EQ(ElementSizeBytes(ElementType::kF8E4M3FN), 1);
  EXPECT_EQ(ElementSizeBytes(ElementType::kF8E5M2), 1);
  EXPECT_EQ(Fp8MaxFinite(ElementType::kF8E4M3FN), 448.0f);
  EXPECT_EQ(Fp8MaxFinite(ElementType::kF8E5M2), 57344.0f);
}

TEST(StorageFormatTest, BytesIncludeScales) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const StorageFormat per_row{ElementType::kF8E4M3FN, Scaling::kPerRow};
  EXPECT_EQ(*per_row.NumScales(shape), 3);
  EXPECT_EQ(*per_row.DataBytes(shape), 60);
  EXPECT_EQ(*per_row.ScaleBytes(shape), 12);
  EXPECT_EQ(*per_row.TotalBytes(shape), 72);
  const StorageFormat per_tensor{ElementType::kF8E5M2, Scaling::kPerTensor};
  EXPECT_EQ(*per_tensor.TotalBytes(shape), 64);
  EXPECT_EQ(*StorageFormat::Plain(ElementType::kBF16).TotalBytes(shape), 120);
  EXPECT_EQ(*per_row.TotalBytes({}), 5);  // A scalar is one row.
}

TEST(StorageFormatTest, PerBlockParsesAndSizesItsScaleGrid) {
  absl::StatusOr<StorageFormat> parsed =
      StorageFormat::Parse("f8_e4m3fn:PER_BLOCK_128x64");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, StorageFormat::PerBlock(ElementType::kF8E4M3FN, 128, 64));
  EXPECT_EQ(parsed->ToString(), "F8_E4M3FN:per_block_128x64");
  EXPECT_NE(*parsed, StorageFormat::PerBlock(ElementType::kF8E4M3FN, 64, 128));
  // Ragged last blocks have a scale each: [300, 130] in 128x64 blocks.
  EXPECT_EQ(*parsed->ScaleShape({300, 130}), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(*parsed->NumScales({300, 130}), 9);
  EXPECT_EQ(*parsed->TotalBytes({300, 130}), 300 * 130 + 9 * 4);
  // Dims after the first are the columns.
  EXPECT_EQ(*parsed->ScaleShape({128, 2, 64}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*parsed->ScaleShape({0, 64}), (std::vector<int64_t>{0, 1}));
  EXPECT_THAT(parsed->NumScales({300}).status().message(),
              HasSubstr("rank >= 2"));
  const StorageFormat per_row{ElementType::kF8E5M2, Scaling::kPerRow};
  EXPECT_EQ(*per_row.ScaleShape({7, 3}), (std::vector<int64_t>{7}));
}

TEST(StorageFormatTest, PerBlockRefusesBadBlockSizes) {
  for (const char* text :
       {"F8_E4M3FN:per_block_0x128", "F8_E4M3FN:per_block_128",
        "F8_E4M3FN:per_block_axb", "F8_E4M3FN:per_block_99999999x1",
        "BF16:per_block_128x128"}) {
    EXPECT_FALSE(StorageFormat::Parse(text).ok()) << text;
  }
  EXPECT_FALSE(ParseScaling("per_block").ok());
  // A block size without per-block scaling is no valid format.
  EXPECT_FALSE(
      (StorageFormat{ElementType::kF8E4M3FN, Scaling::kPerRow, 128, 128})
          .Validate()
          .ok());
}

TEST(StorageFormatTest, BadShapesAreErrors) {
  const StorageFormat format = StorageFormat::Plain(ElementType::kF32);
  EXPECT_THAT(format.DataBytes({2, -1}).status().message(),
              HasSubstr("negative dimension -1"));
  EXPECT_THAT(
      format.DataBytes({int64_t{1} << 40, int64_t{1} << 30}).status().message(),
      HasSubstr("overflows"));
}

}  // namespace
}  // namespace castserve::casting
