#include "server/lifecycle/model_repository.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ModelRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }

  void WriteFile(const fs::path& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }

  fs::path root_;
};

TEST_F(ModelRepositoryTest, ScanFindsModelsSortedWithReasonsForBadOnes) {
  WriteFile("zeta/config.pbtxt", "max_batch_size: 2");
  WriteFile("alpha/config.pbtxt", "name: \"alpha\"");
  WriteFile("broken/config.pbtxt", "max_batch_size: many");
  fs::create_directories(root_ / "no_config");
  WriteFile("README.md", "not a model");
  fs::create_directories(root_ / ".hidden");

  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open(root_.string());
  ASSERT_TRUE(repository.ok()) << repository.status();
  absl::StatusOr<std::vector<ModelEntry>> models = (*repository)->Scan();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 4u);
  EXPECT_EQ((*models)[0].name, "alpha");
  EXPECT_TRUE((*models)[0].config.ok());
  EXPECT_EQ((*models)[1].name, "broken");
  EXPECT_THAT((*models)[1].config.status().message(),
              HasSubstr("config.pbtxt:1:17"));
  EXPECT_EQ((*models)[2].name, "no_config");
  EXPECT_EQ((*models)[2].config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*models)[3].name, "zeta");
  ASSERT_TRUE((*models)[3].config.ok());
  EXPECT_EQ((*models)[3].config->name(), "zeta");
  EXPECT_EQ((*models)[3].config->max_batch_size(), 2);
}

// The repository reads through the FileSystem given: an in-memory tree with
// an unreadable config and a model folder that is a symlink leaving it.
TEST(ModelRepositoryFileSystemTest, ScansAnInMemoryTree) {
  platform::FakeFileSystem file_system;
  file_system.AddFile("/repo/alpha/config.pbtxt", "max_batch_size: 2");
  file_system.AddFile("/repo/locked/config.pbtxt", "");
  file_system.FailOn("/repo/locked/config.pbtxt",
                     absl::StatusCode::kPermissionDenied,
                     "cannot open: Permission denied");
  file_system.AddFile("/elsewhere/model/config.pbtxt", "");
  file_system.AddSymlink("/repo/linked", "/elsewhere/model");
  file_system.AddFile("/repo/README.md", "not a model");
  file_system.AddDirectory("/repo/.hidden");

  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open("/repo", false, &file_system);
  ASSERT_TRUE(repository.ok()) << repository.status();
  absl::StatusOr<std::vector<ModelEntry>> models = (*repository)->Scan();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 3u);
  EXPECT_EQ((*models)[0].name, "alpha");
  ASSERT_TRUE((*models)[0].config.ok()) << (*models)[0].config.status();
  EXPECT_EQ((*models)[0].config->max_batch_size(), 2);
  EXPECT_EQ((*models)[1].name, "linked");
  EXPECT_THAT((*models)[1].config.status().message(),
              HasSubstr("outside the model repository"));
  EXPECT_EQ((*models)[2].name, "locked");
  EXPECT_EQ((*models)[2].config.status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*models)[2].config.status().message(),
            "model 'locked': /repo/locked/config.pbtxt: cannot open: "
            "Permission denied");
  EXPECT_TRUE((*repository)->Contains("alpha"));
  EXPECT_FALSE((*repository)->Contains("README.md"));
  EXPECT_EQ(ModelRepository::Open("/repo/README.md", false, &file_system)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ModelRepositoryTest, EmptyRepositoryIsValid) {
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open(root_.string());
  ASSERT_TRUE(repository.ok());
  EXPECT_TRUE((*repository)->Scan()->empty());
}

TEST_F(ModelRepositoryTest, MissingPathIsNotFound) {
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open((root_ / "absent").string());
  ASSERT_FALSE(repository.ok());
  EXPECT_EQ(repository.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(repository.status().message(), HasSubstr("does not exist"));
}

TEST_F(ModelRepositoryTest, PlainFileIsNotARepository) {
  WriteFile("file", "x");
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open((root_ / "file").string());
  ASSERT_FALSE(repository.ok());
  EXPECT_EQ(repository.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ModelRepositoryTest, UnreadableRepositoryIsPermissionDenied) {
  if (geteuid() == 0) {
    // root reads everything; access() cannot fail. Check the error path with
    // a path component that is not a directory instead.
    WriteFile("file", "x");
    absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
        ModelRepository::Open((root_ / "file" / "sub").string());
    ASSERT_FALSE(repository.ok());
    EXPECT_NE(repository.status().code(), absl::StatusCode::kOk);
    return;
  }
  fs::create_directories(root_ / "locked");
  chmod((root_ / "locked").c_str(), 0);
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open((root_ / "locked").string());
  ASSERT_FALSE(repository.ok());
  EXPECT_EQ(repository.status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace castserve
