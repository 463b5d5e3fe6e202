#include "server/http/head_screen.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

HttpResponse PlainError(int status_code, absl::string_view message) {
  return {status_code, "text/plain", std::string(message), {}};
}

HttpRequest Head(const std::string& method, const std::string& path) {
  HttpRequest head;
  head.method = method;
  head.path = path;
  return head;
}

TEST(HeadScreenTest, MatchedPlainRequestPasses) {
  EXPECT_FALSE(RefuseHead(Head("POST", "/x"), {true}, "test API", PlainError));
  HttpRequest identity = Head("POST", "/x");
  identity.headers["content-encoding"] = "identity";
  EXPECT_FALSE(RefuseHead(identity, {true}, "test API", PlainError));
}

TEST(HeadScreenTest, UnknownPathIs404NamingTheApi) {
  std::optional<HttpResponse> refusal = RefuseHead(
      Head("GET", "/nowhere"), {false, 404, ""}, "test API", PlainError);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status_code, 404);
  EXPECT_EQ(refusal->body, "no test API path /nowhere");
  EXPECT_TRUE(refusal->headers.empty());
}

TEST(HeadScreenTest, WrongMethodIs405WithAllow) {
  std::optional<HttpResponse> refusal = RefuseHead(
      Head("DELETE", "/x"), {false, 405, "GET, HEAD"}, "test API", PlainError);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status_code, 405);
  EXPECT_EQ(refusal->body, "DELETE is not allowed on /x (GET, HEAD)");
  EXPECT_THAT(refusal->headers, ElementsAre(Pair("Allow", "GET, HEAD")));
}

TEST(HeadScreenTest, EncodedBodyIs415) {
  HttpRequest head = Head("POST", "/x");
  head.headers["content-encoding"] = "gzip";
  std::optional<HttpResponse> refusal =
      RefuseHead(head, {true}, "test API", PlainError);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status_code, 415);
  EXPECT_EQ(refusal->body, "Content-Encoding 'gzip' is not accepted");
}

}  // namespace
}  // namespace castserve
