#include "server/log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

TEST(LogTest, FormatsOneLogfmtLineWithTimestamp) {
  const std::string line = FormatLogLine(LogLevel::kInfo, "model found",
                                         {{"name", "bert"}, {"n", 3}});
  EXPECT_THAT(line,
              MatchesRegex("ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z "
                           "level=info msg=\"model found\" name=bert n=3"));
}

TEST(LogTest, QuotesAndEscapesSoARecordStaysOnOneLine) {
  const std::string line = FormatLogLine(
      LogLevel::kError, "bad", {{"reason", "line one\nsaid \"no\" a=b"}});
  EXPECT_THAT(line, HasSubstr(R"(reason="line one\nsaid \"no\" a=b")"));
  EXPECT_THAT(line, Not(HasSubstr("\n")));
}

TEST(LogTest, BytesThatAreNoUtf8AreEscaped) {
  // A file name or a file's bytes quoted in an error.
  const std::string line = FormatLogLine(LogLevel::kError, "load failed",
                                         {{"error", "bad\xff\xc2\x85 \\x"}});
  EXPECT_THAT(line, HasSubstr(R"(error="bad\xff\u0085 \\x")"));
}

TEST(LogTest, EmptyValuesAreQuoted) {
  EXPECT_THAT(FormatLogLine(LogLevel::kWarning, "x", {{"k", ""}}),
              HasSubstr("level=warning msg=x k=\"\""));
}

TEST(LogTest, ParsesLevelsAndRejectsUnknownOnes) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("INFO"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  absl::StatusOr<LogLevel> bad = ParseLogLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'loud'"));
}

TEST(LogTest, LevelFiltersRecords) {
  SetLogLevel(LogLevel::kWarning);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  SetLogLevel(LogLevel::kInfo);
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
}

TEST(LogTest, LongTextIsAbbreviatedWithItsSize) {
  EXPECT_EQ(Abbreviated("short"), "short");
  EXPECT_EQ(Abbreviated(std::string(10, 'a'), 4), "aaaa...(10 bytes)");
  // Sanitized, and cut on a character: "\xC3\xA9" is one.
  EXPECT_EQ(Abbreviated("a\nb"), "a\\nb");
  EXPECT_EQ(Abbreviated("abc\xC3\xA9xyz", 4), "abc...(8 bytes)");
  EXPECT_EQ(Abbreviated("abc\xC3\xA9xyz", 5), "abc\xC3\xA9...(8 bytes)");
  const std::string line =
      FormatLogLine(LogLevel::kInfo, "m", {{"name", std::string(100000, 'x')}});
  EXPECT_LT(line.size(), kMaxLogValueBytes + 200);
  EXPECT_NE(line.find("...(100000 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace castserve
