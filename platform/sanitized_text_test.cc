#include "platform/sanitized_text.h"

#include <gtest/gtest.h>

#include <string>

namespace castserve::platform {
namespace {

using namespace std::string_literals;

TEST(SanitizeTextTest, KeepsPrintableUtf8) {
  EXPECT_EQ(SanitizeText("model.safetensors"), "model.safetensors");
  EXPECT_EQ(
      SanitizeText("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82"),
      "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82");
  EXPECT_EQ(SanitizeText(""), "");
}

TEST(SanitizeTextTest, EscapesControlCharacters) {
  EXPECT_EQ(SanitizeText("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(SanitizeText("nul\0bell\x07 del\x7f"s),
            "nul\\x00bell\\x07 del\\x7f");
  EXPECT_EQ(SanitizeText("esc\x1b[31m"), "esc\\x1b[31m");
  // C1 controls, well-formed UTF-8 (U+0085 NEL, U+009B CSI).
  EXPECT_EQ(SanitizeText("x\xc2\x85y\xc2\x9b"), "x\\u0085y\\u009b");
  // U+00A0 is no control.
  EXPECT_EQ(SanitizeText("\xc2\xa0"), "\xc2\xa0");
}

TEST(SanitizeTextTest, EscapesEachByteOfIllFormedUtf8) {
  EXPECT_EQ(SanitizeText("bad\xff name"), "bad\\xff name");
  EXPECT_EQ(SanitizeText("\x80\xbf"), "\\x80\\xbf");           // Stray.
  EXPECT_EQ(SanitizeText("\xc3"), "\\xc3");                    // Cut.
  EXPECT_EQ(SanitizeText("\xe6\x97"), "\\xe6\\x97");           // Cut.
  EXPECT_EQ(SanitizeText("\xc0\xaf"), "\\xc0\\xaf");           // Overlong.
  EXPECT_EQ(SanitizeText("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // Overlong.
  EXPECT_EQ(SanitizeText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // Surrogate.
  EXPECT_EQ(SanitizeText("\xf4\x90\x80\x80"),
            "\\xf4\\x90\\x80\\x80");  // > max.
  // A good character right after a bad byte survives.
  EXPECT_EQ(SanitizeText("\xe6\xc3\xa9"), "\\xe6\xc3\xa9");
}

TEST(SanitizeTextTest, TruncatesOnCharacterBoundariesWithinTheBound) {
  EXPECT_EQ(SanitizeText("abcdef", 6), "abcdef");
  EXPECT_EQ(SanitizeText("abcdefg", 6), "abc...");
  // A 2-byte character is never split.
  const std::string accents = "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";  // 8 bytes.
  EXPECT_EQ(SanitizeText(accents, 7), "\xc3\xa9\xc3\xa9...");
  // Nor is an escape.
  EXPECT_EQ(SanitizeText("ab\xff\xff\xff", 8), "ab...");
  for (size_t bound = 3; bound < 40; ++bound) {
    const std::string out = SanitizeText(
        "x\xff\n\xe6\x97\xa5yz\x01\x02\x03" + std::string(30, 'q'), bound);
    EXPECT_LE(out.size(), bound);
    EXPECT_EQ(SanitizeText(out, 1000), out) << "bound " << bound;
  }
  EXPECT_EQ(SanitizeText("abcdef", 0), "...");
}

TEST(SanitizeTextTest, IsSanitizedAcceptsExactlyWhatSanitizeKeeps) {
  for (const std::string text :
       {"bert"s, "caf\xc3\xa9"s, ""s, "a\\b"s, "bad\xff"s, "nl\n"s,
        "c1\xc2\x85"s, "nul\0"s, "\xed\xa0\x80"s}) {
    EXPECT_EQ(IsSanitized(text), SanitizeText(text, 1000) == text) << text;
  }
  EXPECT_TRUE(IsSanitized("model-\xe6\x97\xa5"));
  EXPECT_FALSE(IsSanitized("model\xff"));
}

TEST(SanitizeTextTest, OutputIsValidAndStableForEveryByte) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  const std::string out = SanitizeText(all, 100000);
  // Sanitizing again changes nothing: no control characters or bad bytes
  // are left (backslashes stay as they are).
  EXPECT_EQ(SanitizeText(out, 100000), out);
  for (char c : out) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 && byte != 0x7f && byte < 0x80) << int(byte);
  }
}

}  // namespace
}  // namespace castserve::platform
