#include "platform/length_prefixed.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::platform {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

TEST(LengthPrefixedTest, RoundTripsElementsIncludingEmptyAndBinary) {
  const std::vector<std::string> elements = {"", "a", std::string("\0\xff", 2),
                                             std::string(300, 'x')};
  const std::string raw = JoinLengthPrefixed(elements);
  EXPECT_EQ(raw.size(), 4 * 4 + 0 + 1 + 2 + 300);
  EXPECT_EQ(raw.substr(0, 8), std::string("\0\0\0\0\1\0\0\0a", 8));
  EXPECT_THAT(SplitLengthPrefixed(raw), Optional(elements));
  EXPECT_THAT(SplitLengthPrefixed(""), Optional(ElementsAre()));
}

TEST(LengthPrefixedTest, RefusesWhatIsNotWholeElements) {
  const std::string raw = JoinLengthPrefixed({"abc", "de"});
  for (size_t cut = 1; cut < raw.size(); ++cut) {
    if (cut == 7) continue;  // "abc" alone is whole.
    EXPECT_EQ(SplitLengthPrefixed(raw.substr(0, cut)), std::nullopt) << cut;
  }
  EXPECT_THAT(SplitLengthPrefixed(raw.substr(0, 7)),
              Optional(ElementsAre("abc")));
  // A length far past the end.
  EXPECT_EQ(SplitLengthPrefixed(std::string("\xff\xff\xff\xff", 4)),
            std::nullopt);
}

}  // namespace
}  // namespace castserve::platform
