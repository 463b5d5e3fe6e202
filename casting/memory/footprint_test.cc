#include "casting/memory/footprint.h"

#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

TEST(FootprintTest, StartsEmpty) {
  const Footprint footprint;
  EXPECT_EQ(footprint.mapped_bytes(), 0);
  EXPECT_TRUE(footprint.resident_bytes_by_format().empty());
  EXPECT_EQ(footprint.owned_bytes(), 0);
  EXPECT_EQ(footprint.ToString(),
            "mapped=0 B resident={} cached_compute=0 B transient_compute=0 B");
}

TEST(FootprintTest, AccumulatesBytesByState) {
  Footprint footprint;
  footprint.AddMapped(3 << 20);
  footprint.AddResident("f8_e4m3fn", 1000);
  footprint.AddResident("bf16", 2048);
  footprint.AddResident("f8_e4m3fn", 24);
  footprint.AddCachedCompute(4096);
  footprint.AddTransientCompute(512);

  EXPECT_EQ(footprint.mapped_bytes(), 3 << 20);
  EXPECT_EQ(footprint.resident_bytes("f8_e4m3fn"), 1024);
  EXPECT_EQ(footprint.resident_bytes("bf16"), 2048);
  EXPECT_EQ(footprint.resident_bytes("f16"), 0);
  EXPECT_EQ(footprint.total_resident_bytes(), 3072);
  EXPECT_EQ(footprint.cached_compute_bytes(), 4096);
  EXPECT_EQ(footprint.transient_compute_bytes(), 512);
  // Mapped pages belong to the page cache, not to the process.
  EXPECT_EQ(footprint.owned_bytes(), 3072 + 4096 + 512);
}

TEST(FootprintTest, MergesReportsOfSeveralWeights) {
  Footprint a;
  a.AddMapped(100);
  a.AddResident("bf16", 10);
  a.AddCachedCompute(7);
  Footprint b;
  b.AddResident("bf16", 5);
  b.AddResident("f8_e5m2/per_row", 3);
  b.AddTransientCompute(11);

  const Footprint sum = a + b;
  EXPECT_EQ(sum.mapped_bytes(), 100);
  EXPECT_EQ(sum.resident_bytes("bf16"), 15);
  EXPECT_EQ(sum.resident_bytes("f8_e5m2/per_row"), 3);
  EXPECT_EQ(sum.cached_compute_bytes(), 7);
  EXPECT_EQ(sum.transient_compute_bytes(), 11);

  Footprint accumulated;
  accumulated += a;
  accumulated += b;
  EXPECT_EQ(accumulated, sum);
  EXPECT_NE(accumulated, a);
  EXPECT_EQ(b + a, a + b);
}

TEST(FootprintTest, ToStringIsOneSortedLine) {
  Footprint footprint;
  footprint.AddMapped(3 * 1024 * 1024 / 2);
  footprint.AddResident("f8_e4m3fn", 512);
  footprint.AddResident("bf16", 2048);
  EXPECT_EQ(footprint.ToString(),
            "mapped=1.50 MiB resident={bf16=2.00 KiB, f8_e4m3fn=512 B} "
            "cached_compute=0 B transient_compute=0 B");
}

TEST(FootprintTest, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(int64_t{1633} << 20), "1.59 GiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 40), "5.00 TiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 50), "5120.00 TiB");
}

}  // namespace
}  // namespace castserve::casting
