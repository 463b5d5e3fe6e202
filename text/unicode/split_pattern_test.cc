#include "text/unicode/split_pattern.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLlama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::vector<std::string> Matches(const std::string& pattern,
                                 const std::string& text) {
  absl::StatusOr<std::unique_ptr<SplitPattern>> compiled =
      SplitPattern::Create({true, pattern});
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  std::vector<std::string> out;
  if (!compiled.ok()) return out;
  for (const auto& [begin, end] : (*compiled)->FindMatches(text)) {
    out.push_back(text.substr(begin, end - begin));
  }
  return out;
}

// Expected values from Oniguruma, as the tokenizers library runs it.
TEST(SplitPatternTest, EmulatesTheWhitespaceLookahead) {
  EXPECT_THAT(Matches("\\s+(?!\\S)|\\s+", "a   b  \n c   "),
              ElementsAre("  ", " ", "  \n", " ", "   "));
  EXPECT_THAT(Matches(kLlama3, "Hello   world  \n\n it's 12345!!\t"),
              ElementsAre("Hello", "  ", " world", "  \n\n", " it", "'s", " ",
                          "123", "45", "!!", "\t"));
  EXPECT_THAT(Matches(kLlama3, "x \u3000y"), ElementsAre("x", " ", "\u3000y"));
}

TEST(SplitPatternTest, ClassEscapesAreUnicode) {
  EXPECT_THAT(Matches("\\s",
                      "a\u00a0b\u3000c\u2028d\x0b"
                      "e\u200bf"),
              ElementsAre("\u00a0", "\u3000", "\u2028", "\x0b"));
  EXPECT_THAT(Matches("\\d+", "a١٢b3"), ElementsAre("١٢", "3"));
  EXPECT_THAT(Matches("\\w+", "aé_١-x"), ElementsAre("aé_١", "x"));
  EXPECT_THAT(Matches("[^\\s\\p{L}]+", "ab, c!"), ElementsAre(",", "!"));
  EXPECT_THAT(Matches("(?i:'s)", "A'S b'ſ"), ElementsAre("'S", "'ſ"));
}

TEST(SplitPatternTest, LiteralPatternsAndEmptyMatches) {
  absl::StatusOr<std::unique_ptr<SplitPattern>> literal =
      SplitPattern::Create({false, "a.b"});
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ((*literal)->FindMatches("xa.bya.b").size(), 2u);
  EXPECT_TRUE((*literal)->FindMatches("axb").empty());
  EXPECT_THAT(Matches("a*", "baab"), ElementsAre("aa"));
}

TEST(SplitPatternTest, RejectsLookaroundRe2CannotRun) {
  for (const std::string pattern :
       {"a(?=b)", "(?<!x)y", "(?>ab)", "\\s+(?!\\S)", "a++", "[^\\S]", "(a"}) {
    absl::StatusOr<std::unique_ptr<SplitPattern>> compiled =
        SplitPattern::Create({true, pattern});
    ASSERT_FALSE(compiled.ok()) << pattern;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(compiled.status().message(), HasSubstr(pattern));
  }
}

}  // namespace
}  // namespace castserve::text
