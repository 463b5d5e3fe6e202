#include "text/unicode/unicode.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::text {
namespace {

TEST(UnicodeTest, ValidatesUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("é中😀"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
}

TEST(UnicodeTest, DecodesAndEncodesCodePoints) {
  const std::string text = "aé中😀";
  size_t pos = 0;
  EXPECT_EQ(NextCodePoint(text, &pos), U'a');
  EXPECT_EQ(NextCodePoint(text, &pos), U'é');
  EXPECT_EQ(NextCodePoint(text, &pos), U'中');
  EXPECT_EQ(NextCodePoint(text, &pos), U'😀');
  EXPECT_EQ(pos, text.size());
  std::string out;
  for (char32_t c : {U'a', U'é', U'中', U'😀'}) AppendUtf8(c, &out);
  EXPECT_EQ(out, text);
  EXPECT_EQ(CodePointCount(text), 4u);
}

TEST(UnicodeTest, LossyDecodingReplacesIllFormedParts) {
  EXPECT_EQ(Utf8Lossy("a\xff"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(Utf8Lossy("\xe4\xb8"), "\xEF\xBF\xBD");  // one maximal subpart
  EXPECT_EQ(Utf8Lossy("é"), "é");
}

TEST(UnicodeTest, LowercasesLikeRust) {
  std::string out;
  for (char32_t c : {U'A', U'Ä', U'Σ', U'İ', U'Ω', U'ß', U'ǅ'})
    AppendLowercase(c, &out);
  EXPECT_EQ(out, "aäσi̇ωßǆ");
}

TEST(UnicodeTest, ClassesFollowTheTokenizersCrateTables) {
  EXPECT_TRUE(IsWhitespace(U'\u3000'));
  EXPECT_TRUE(IsWhitespace(U'\u0085'));
  EXPECT_FALSE(IsWhitespace(U'\u200b'));
  EXPECT_TRUE(IsBertControl(U'\u200d'));
  EXPECT_FALSE(IsBertControl(U'\t'));
  EXPECT_FALSE(IsBertControl(U'\u0890'));  // Cf, but assigned after Unicode 8.0
  EXPECT_TRUE(IsBertPunctuation(U'$'));
  EXPECT_TRUE(IsBertPunctuation(U'«'));
  EXPECT_FALSE(IsBertPunctuation(U'\u2e45'));  // Po since Unicode 10
  EXPECT_TRUE(IsChineseChar(U'中'));
  EXPECT_FALSE(IsChineseChar(U'あ'));
  EXPECT_TRUE(IsNonspacingMark(U'\u0301'));
}

TEST(UnicodeTest, NormalizationForms) {
  EXPECT_EQ(NormalizeUnicode("cafe\u0301", NormalizationForm::kNfc).value(),
            "café");
  EXPECT_EQ(NormalizeUnicode("café", NormalizationForm::kNfd).value(),
            "cafe\u0301");
  EXPECT_EQ(NormalizeUnicode("ﬁ", NormalizationForm::kNfkc).value(), "fi");
  EXPECT_EQ(NormalizeUnicode("", NormalizationForm::kNfc).value(), "");
}

// Extended grapheme clusters: a base and its marks, CR LF, an emoji with
// its skin tone, a ZWJ sequence and a flag stay together.
TEST(UnicodeTest, GraphemeEndsAreExtendedClusterBoundaries) {
  using ::testing::ElementsAre;
  EXPECT_THAT(GraphemeEnds("").value(), ElementsAre());
  EXPECT_THAT(GraphemeEnds("ab").value(), ElementsAre(1, 2));
  EXPECT_THAT(GraphemeEnds("a\u0301b").value(), ElementsAre(3, 4));
  EXPECT_THAT(GraphemeEnds("\r\n\n").value(), ElementsAre(2, 3));
  EXPECT_THAT(GraphemeEnds("\U0001F44D\U0001F3FDx").value(), ElementsAre(8, 9));
  EXPECT_THAT(
      GraphemeEnds("\U0001F468\u200D\U0001F469\u200D\U0001F467.").value(),
      ElementsAre(18, 19));
  EXPECT_THAT(GraphemeEnds("\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5").value(),
              ElementsAre(8, 16));
}

}  // namespace
}  // namespace castserve::text
