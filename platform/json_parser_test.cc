#include "platform/json_parser.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::platform {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// Fails with InvalidArgument and a message holding `piece`.
void ExpectInvalid(absl::string_view text, const std::string& piece,
                   const JsonLimits& limits = {}) {
  absl::StatusOr<nlohmann::json> json = ParseJson(text, limits);
  ASSERT_FALSE(json.ok()) << text;
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(json.status().message()), HasSubstr(piece));
}

TEST(JsonParserTest, BuildsTheDocument) {
  absl::StatusOr<nlohmann::json> json = ParseJson(
      R"({"a": [1, -2, 2.5, "x", true, null], "b": {"c": {}}, "d": []})");
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json expected = {{"a", {1, -2, 2.5, "x", true, nullptr}},
                                   {"b", {{"c", nlohmann::json::object()}}},
                                   {"d", nlohmann::json::array()}};
  EXPECT_EQ(*json, expected);
  EXPECT_TRUE(ParseJson("  7 ").ok());
}

TEST(JsonParserTest, SyntaxErrorsNameTheByte) {
  ExpectInvalid(R"({"a": {"dtype": })", "invalid JSON at byte 16: ");
  ExpectInvalid("[1, 2", "invalid JSON at byte 5: ");
  ExpectInvalid("{} x", "invalid JSON at byte 3: ");
  ExpectInvalid("", "invalid JSON at byte 0: ");
}

TEST(JsonParserTest, RefusesWhatRfc8259Refuses) {
  ExpectInvalid("{'a': 1}", "invalid JSON at byte 1");
  ExpectInvalid("[01]", "invalid JSON");
  ExpectInvalid("[1,]", "invalid JSON");
  ExpectInvalid("[\"tab\there\"]", "control character");
  ExpectInvalid("[\"\\ud800\"]", "surrogate");
  ExpectInvalid("[\"\xC3\"]", "UTF-8");
  ExpectInvalid("// comment\n{}", "invalid JSON");
  ExpectInvalid("[1e400]", "number overflow");
}

TEST(JsonParserTest, DecodesEscapes) {
  absl::StatusOr<nlohmann::json> json =
      ParseJson(R"(["\u00e9\ud83d\ude00\n\"\\\/"])");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)[0], "\xC3\xA9\xF0\x9F\x98\x80\n\"\\/");
}

TEST(JsonParserTest, NestingIsBoundedBeforeItIsBuilt) {
  EXPECT_TRUE(ParseJson(Nested(64)).ok());
  ExpectInvalid(Nested(65), "invalid JSON: nesting deeper than 64");
  ExpectInvalid(Nested(1000000), "nesting deeper than 64");
  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_TRUE(ParseJson(R"({"a": [1]})", shallow).ok());
  ExpectInvalid(R"({"a": [{}]})", "nesting deeper than 2", shallow);
}

TEST(JsonParserTest, SizeIsBoundedBeforeParsing) {
  JsonLimits small;
  small.max_bytes = 8;
  EXPECT_TRUE(ParseJson("[1,2,3]", small).ok());
  ExpectInvalid("[1,2,3,4]", "JSON text of 9 bytes exceeds the limit of 8",
                small);
}

TEST(JsonParserTest, DuplicateKeysAreRefusedAtAnyDepth) {
  ExpectInvalid(R"({"a": 1, "a": 2})", "invalid JSON: duplicate key \"a\"");
  ExpectInvalid(R"([{"x": {"k": 1, "k": 1}}])", "duplicate key \"k\"");
  // The same key in sibling objects is fine.
  EXPECT_TRUE(ParseJson(R"([{"k": 1}, {"k": 2}])").ok());
}

TEST(JsonParserTest, IntegersKeepTheirExactValue) {
  absl::StatusOr<nlohmann::json> json =
      ParseJson("[18446744073709551615, -9223372036854775808, 12.0]");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE((*json)[0].is_number_unsigned());
  EXPECT_EQ((*json)[0].get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ((*json)[1].get<int64_t>(), INT64_MIN);
  EXPECT_TRUE((*json)[2].is_number_float());  // Not an integer.
  // Past 64 bits an integer literal becomes a double, never a wrapped value.
  absl::StatusOr<nlohmann::json> big = ParseJson("18446744073709551616");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->is_number_integer());
}

TEST(JsonParserTest, MessagesStayShortWhateverTheInput) {
  const std::string unterminated = "[\"" + std::string(1 << 20, 'x');
  absl::StatusOr<nlohmann::json> json = ParseJson(unterminated);
  ASSERT_FALSE(json.ok());
  EXPECT_LT(json.status().message().size(), 400u);
  const std::string long_key = std::string(1 << 16, 'k');
  json = ParseJson("{\"" + long_key + "\":1,\"" + long_key + "\":2}");
  ASSERT_FALSE(json.ok());
  EXPECT_LT(json.status().message().size(), 400u);
}

TEST(JsonParserTest, MessagesQuoteInputBytesAsValidUtf8) {
  // A garbage safetensors header: the parser quotes what it last read.
  const std::string garbage = "{\"a\": \x01\xff\xfe\x80\n\x1b[2J\xc3";
  absl::StatusOr<nlohmann::json> json = ParseJson(garbage);
  ASSERT_FALSE(json.ok());
  const std::string message(json.status().message());
  EXPECT_THAT(message, HasSubstr("invalid JSON at byte"));
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 && byte < 0x7f)
        << "byte " << int(byte) << " in " << message;
  }
  // Invalid UTF-8 inside a string is quoted escaped too.
  json = ParseJson("[\"ok\xff\xfe\"]");
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("\\xff"));
}

TEST(JsonParserTest, TypeNamesReadAsEnglish) {
  EXPECT_EQ(JsonTypeName(nlohmann::json()), "null");
  EXPECT_EQ(JsonTypeName(nlohmann::json(true)), "a boolean");
  EXPECT_EQ(JsonTypeName(nlohmann::json(3u)), "a number");
  EXPECT_EQ(JsonTypeName(nlohmann::json(-3)), "a number");
  EXPECT_EQ(JsonTypeName(nlohmann::json(0.5)), "a number");
  EXPECT_EQ(JsonTypeName(nlohmann::json("s")), "a string");
  EXPECT_EQ(JsonTypeName(nlohmann::json::array()), "an array");
  EXPECT_EQ(JsonTypeName(nlohmann::json::object()), "an object");
}

}  // namespace
}  // namespace castserve::platform
