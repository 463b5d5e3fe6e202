#include "server/lifecycle/repository_boundary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace castserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RepositoryBoundaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    base_ = fs::path(tmp != nullptr ? tmp : "/tmp") /
            ("boundary_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "repo" / "model" / "hf");
    fs::create_directories(base_ / "elsewhere");
    std::ofstream(base_ / "repo" / "model" / "hf" / "model.safetensors") << "x";
    std::ofstream(base_ / "elsewhere" / "secret") << "x";
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string Repo(const std::string& relative) const {
    return (base_ / "repo" / relative).string();
  }

  fs::path base_;
};

TEST_F(RepositoryBoundaryTest, PathsInsideAndInsideSymlinksPass) {
  const RepositoryBoundary boundary{Repo("")};
  EXPECT_TRUE(boundary.Check(Repo("model/hf/model.safetensors"), "f").ok());
  fs::create_symlink("hf", base_ / "repo" / "model" / "ckpt");
  EXPECT_TRUE(boundary.Check(Repo("model/ckpt/model.safetensors"), "f").ok());
  // Missing files are left to their opener.
  EXPECT_TRUE(boundary.Check(Repo("model/absent"), "f").ok());
}

TEST_F(RepositoryBoundaryTest, SymlinksLeadingOutsideAreRefused) {
  fs::create_symlink(base_ / "elsewhere" / "secret",
                     base_ / "repo" / "model" / "linked");
  fs::create_symlink(base_ / "elsewhere", base_ / "repo" / "other");
  // A repository given through a symlink of its own is still itself.
  fs::create_symlink(base_ / "repo", base_ / "repo_link");
  const RepositoryBoundary boundary{(base_ / "repo_link").string()};
  for (const std::string& path :
       {Repo("model/linked"), Repo("other/secret"), Repo("other")}) {
    absl::Status status = boundary.Check(path, "checkpoint file");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(status.message(),
                HasSubstr("outside the model repository " +
                          fs::canonical(base_ / "repo").string()));
    EXPECT_THAT(status.message(), HasSubstr("checkpoint file " + path));
    EXPECT_THAT(status.message(),
                HasSubstr("--allow-symlinks-outside-repository"));
  }
  EXPECT_TRUE(boundary.Check(Repo("model/hf/model.safetensors"), "f").ok());
  const RepositoryBoundary allowing{Repo(""), true};
  EXPECT_TRUE(allowing.Check(Repo("model/linked"), "f").ok());
}

}  // namespace
}  // namespace castserve
