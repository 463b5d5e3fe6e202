#include "server/core/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/test_util/fake_clock.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kInfer[] = "infer-token-0123456789";
constexpr char kAdmin[] = "admin-token-0123456789";

std::string Bearer(const std::string& token) { return "Bearer " + token; }

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = (fs::path(tmp != nullptr ? tmp : "/tmp") /
             ("tokens_" + std::to_string(::getpid())))
                .string();
  }
  void TearDown() override { fs::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }

  std::string path_;
};

TEST_F(TokenFileTest, ScopesDecideWhatATokenMayDo) {
  Write(absl::StrCat("# tokens\n", kInfer, " infer\n", kAdmin,
                     " admin,infer,metrics  # operators\n"));
  auto auth = TokenAuthenticator::Open(path_);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  EXPECT_TRUE((*auth)->Authorize(Bearer(kAdmin), Scope::kAdmin).ok());
  EXPECT_TRUE((*auth)->Authorize(Bearer(kAdmin), Scope::kMetrics).ok());
  absl::Status denied = (*auth)->Authorize(Bearer(kInfer), Scope::kAdmin);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(), "the token does not grant the 'admin' scope");
  for (const std::string& header :
       {std::string(), std::string(kInfer), Bearer("infer-token-012345678"),
        Bearer(std::string(kInfer) + "9"), std::string("Basic abc")}) {
    absl::Status status = (*auth)->Authorize(header, Scope::kInfer);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << header;
    EXPECT_THAT(status.message(), Not(HasSubstr(kInfer)));
  }
}

TEST_F(TokenFileTest, ExpiredTokensAreRefused) {
  Write(absl::StrCat(kInfer, " infer expires=2020-01-01T00:00:00Z\n", kAdmin,
                     " infer expires=2999-01-01T00:00:00Z\n"));
  auto auth = TokenAuthenticator::Open(path_);
  ASSERT_TRUE(auth.ok()) << auth.status();
  absl::Status expired = (*auth)->Authorize(Bearer(kInfer), Scope::kInfer);
  EXPECT_EQ(expired.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(expired.message(), "the token has expired");
  EXPECT_TRUE((*auth)->Authorize(Bearer(kAdmin), Scope::kInfer).ok());
}

TEST_F(TokenFileTest, ATokenExpiresWhenTheClockPassesItsTime) {
  platform::test_util::FakeClock clock(absl::FromCivil(
      absl::CivilSecond(2030, 6, 1, 11, 0, 0), absl::UTCTimeZone()));
  Write(absl::StrCat(kInfer, " infer expires=2030-06-01T12:00:00Z\n"));
  auto auth =
      TokenAuthenticator::Open(path_, platform::FileSystem::Default(), &clock);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  clock.Advance(absl::Minutes(59));
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  clock.Advance(absl::Minutes(1));
  absl::Status expired = (*auth)->Authorize(Bearer(kInfer), Scope::kInfer);
  EXPECT_EQ(expired.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(expired.message(), "the token has expired");
}

TEST_F(TokenFileTest, RewritingTheFileRotatesTheTokens) {
  platform::test_util::FakeClock clock;
  Write(absl::StrCat(kInfer, " infer\n"));
  auto auth =
      TokenAuthenticator::Open(path_, platform::FileSystem::Default(), &clock);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  // Another size: the rewrite may share the first one's modification time.
  Write(absl::StrCat(kAdmin, " infer  # rotated\n"));
  // Within the once-a-second recheck the file is not looked at again.
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  clock.Advance(absl::Milliseconds(1100));
  EXPECT_EQ((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*auth)->Authorize(Bearer(kAdmin), Scope::kInfer).ok());
  // A broken rewrite keeps the tokens in force.
  Write("garbage\n");
  clock.Advance(absl::Milliseconds(1100));
  EXPECT_TRUE((*auth)->Authorize(Bearer(kAdmin), Scope::kInfer).ok());
}

// The token file is read through the FileSystem given; an unreadable one is
// refused with its path and the reason.
TEST(TokenAuthenticatorTest, ReadsTheTokenFileThroughTheFileSystem) {
  platform::FakeFileSystem file_system;
  file_system.AddFile("/etc/tokens", absl::StrCat(kInfer, " infer\n"));
  auto auth = TokenAuthenticator::Open("/etc/tokens", &file_system);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Authorize(Bearer(kInfer), Scope::kInfer).ok());
  file_system.FailOn("/etc/locked", absl::StatusCode::kPermissionDenied,
                     "cannot stat: Permission denied");
  absl::Status locked =
      TokenAuthenticator::Open("/etc/locked", &file_system).status();
  EXPECT_EQ(locked.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(locked.message(),
            "token file /etc/locked: cannot stat: Permission denied");
}

TEST(ParseTokenFileTest, ErrorsNameTheLineNotTheToken) {
  const std::string short_token = "short";
  for (const auto& [text, problem] :
       std::vector<std::pair<std::string, std::string>>{
           {"", "no tokens"},
           {"# only a comment\n", "no tokens"},
           {short_token + " infer\n", ":1: the token must be 16 to 4096"},
           {absl::StrCat("\n", kInfer, "\n"), ":2: expected '<token> <scope>"},
           {absl::StrCat(kInfer, " root\n"), ":1: unknown scope 'root'"},
           {absl::StrCat(kInfer, " infer soon\n"),
            ":1: the third field must be expires="},
       }) {
    absl::StatusOr<std::vector<TokenGrant>> grants =
        ParseTokenFile(text, "tokens");
    ASSERT_FALSE(grants.ok()) << text;
    EXPECT_THAT(grants.status().message(), HasSubstr(problem));
    EXPECT_THAT(grants.status().message(), Not(HasSubstr(kInfer)));
    EXPECT_THAT(grants.status().message(), Not(HasSubstr(short_token + " ")));
  }
  EXPECT_EQ(TokenAuthenticator::Open("/nonexistent/tokens").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace castserve
