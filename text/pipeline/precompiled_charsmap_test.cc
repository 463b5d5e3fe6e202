#include "text/pipeline/precompiled_charsmap.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

using ::testing::HasSubstr;

// Darts units: an edge with `label` into a node whose children (and leaf
// value unit) sit at offset `offset` from it.
uint32_t Edge(unsigned char label, uint32_t offset, bool has_leaf) {
  return label | (has_leaf ? 1u << 8 : 0u) | (offset << 10);
}
uint32_t LeafValue(uint32_t value) { return 0x80000000u | value; }

// A blob of `units` and `replacements`, as SentencePiece lays it out.
std::string Blob(const std::vector<uint32_t>& units,
                 absl::string_view replacements) {
  std::string blob;
  auto append32 = [&](uint32_t value) {
    for (int i = 0; i < 4; ++i)
      blob.push_back(static_cast<char>(value >> (8 * i)));
  };
  append32(static_cast<uint32_t>(units.size() * 4));
  for (uint32_t unit : units) append32(unit);
  blob.append(replacements.data(), replacements.size());
  return blob;
}

// The map {"a" -> "b", "ab" -> "X"}: the root (unit 0, children at 1);
// "a" at 1 ^ 'a' = 96, its node at 97 (value 0: "b"); "b" after it at
// 97 ^ 'b' = 3, its node at 4 (value 2: "X").
std::vector<uint32_t> TwoKeyUnits(uint32_t a_value = 0) {
  std::vector<uint32_t> units(98, 0);
  units[0] = Edge(0, 1, false);
  units[96] = Edge('a', 96 ^ 97, true);
  units[97] = LeafValue(a_value);
  units[3] = Edge('b', 3 ^ 4, true);
  units[4] = LeafValue(2);
  return units;
}

TEST(PrecompiledCharsmapTest, ShortestKeyOfAGraphemeReplacesItWhole) {
  absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> charsmap =
      PrecompiledCharsmap::Create(
          Blob(TwoKeyUnits(), absl::string_view("b\0X\0", 4)), "charsmap");
  ASSERT_TRUE(charsmap.ok()) << charsmap.status();
  EXPECT_EQ((*charsmap)->Transform("a"), "b");
  EXPECT_EQ((*charsmap)->Transform("ab"), "b");  // the shortest key wins
  EXPECT_EQ((*charsmap)->Transform("b"), std::nullopt);
  EXPECT_EQ((*charsmap)->Transform(absl::string_view("\0a", 2)), std::nullopt);
  // "a" and "b" are graphemes of their own: "ab" -> "b" + "b".
  EXPECT_EQ((*charsmap)->Normalize("abc").value(), "bbc");
  // "a" + U+0301 is one grapheme under 6 bytes: "a" replaces all of it.
  EXPECT_EQ((*charsmap)->Normalize("xa\u0301y").value(), "xby");
  // Six bytes or more: character by character, the accent kept.
  EXPECT_EQ((*charsmap)->Normalize("a\u0301\u0301").value(), "b");
  EXPECT_EQ((*charsmap)->Normalize("a\u0301\u0301\u0301").value(),
            "b\u0301\u0301\u0301");
  EXPECT_EQ((*charsmap)->Normalize("").value(), "");
}

TEST(PrecompiledCharsmapTest, MalformedBlobsAreRefused) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "fewer than the 4"},
      {std::string("\x08\0\0\0\0\0\0\0", 8), "not a positive multiple of 4"},
      {std::string("\x06\0\0\0\0\0\0\0\0\0", 10),
       "not a positive multiple of 4"},
      {Blob(TwoKeyUnits(), absl::string_view("b\0\xff\0", 4)), "not UTF-8"},
      {Blob(TwoKeyUnits(/*a_value=*/9), absl::string_view("b\0X\0", 4)),
       "does not start"},
      {Blob(TwoKeyUnits(/*a_value=*/1), absl::string_view("\xc3\xa9\0X\0", 5)),
       "does not start"},
  };
  for (const auto& [blob, message] : cases) {
    absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> charsmap =
        PrecompiledCharsmap::Create(blob, "normalizer.precompiled_charsmap");
    EXPECT_EQ(charsmap.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(charsmap.status().message(),
                HasSubstr("normalizer.precompiled_charsmap: "));
    EXPECT_THAT(charsmap.status().message(), HasSubstr(message));
  }
}

// Blobs with random bytes changed either fail to load or normalize any text
// to UTF-8 (under AddressSanitizer: tools/run_sanitizers.sh with TARGETS).
TEST(PrecompiledCharsmapTest, CorruptedBlobsLoadOrAreRefusedNeverOverrun) {
  const std::string valid = Blob(TwoKeyUnits(), absl::string_view("b\0X\0", 4));
  const std::string texts[] = {"ab", "a\u0301", "\u00e9a", "xyz\r\n", ""};
  std::mt19937 random(20261202);
  int loaded = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string blob = valid;
    const int changes = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < changes; ++i) {
      blob[random() % blob.size()] = static_cast<char>(random() & 0xFF);
    }
    if (random() % 8 == 0) blob.resize(random() % blob.size());
    absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> charsmap =
        PrecompiledCharsmap::Create(blob, "charsmap");
    if (!charsmap.ok()) {
      EXPECT_EQ(charsmap.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    ++loaded;
    for (const std::string& text : texts) {
      absl::StatusOr<std::string> normalized = (*charsmap)->Normalize(text);
      ASSERT_TRUE(normalized.ok()) << normalized.status();
      EXPECT_TRUE(IsValidUtf8(*normalized));
    }
  }
  EXPECT_GT(loaded, 100);
}

}  // namespace
}  // namespace castserve::text
