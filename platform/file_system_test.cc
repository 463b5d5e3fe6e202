#include "platform/file_system.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve::platform {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using FileType = FileSystem::FileType;

// A fresh directory under the test's scratch space.
std::string MakeScratch(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/file_system_" + name;
  mkdir(path.c_str(), 0755);
  return path;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

// Makes `link` lead to `target`, replacing an older link from a rerun.
bool Symlink(const std::string& target, const std::string& link) {
  unlink(link.c_str());
  return symlink(target.c_str(), link.c_str()) == 0;
}

auto Entry(const std::string& name, FileType type) {
  return AllOf(Field(&FileSystem::DirectoryEntry::name, name),
               Field(&FileSystem::DirectoryEntry::type, type));
}

TEST(FileSystemTest, ReadsAWholeFileWithinItsLimit) {
  const std::string path = MakeScratch("read") + "/text";
  WriteFile(path, "twelve bytes");
  FileSystem* file_system = FileSystem::Default();
  absl::StatusOr<std::string> text = file_system->ReadFile(path, 12);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "twelve bytes");
  absl::StatusOr<FileSystem::FileInfo> info = file_system->Stat(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->size_bytes, 12u);
  EXPECT_GT(info->mtime_ns, 0);
}

TEST(FileSystemTest, RefusesAFileAboveTheLimit) {
  const std::string path = MakeScratch("limit") + "/text";
  WriteFile(path, "twelve bytes");
  absl::StatusOr<std::string> text = FileSystem::Default()->ReadFile(path, 11);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(text.status().message(),
            path + ": 12 bytes, above the limit of 11");
}

TEST(FileSystemTest, MissingPathIsNotFoundNamingIt) {
  const std::string path = MakeScratch("missing") + "/nothing";
  FileSystem* file_system = FileSystem::Default();
  for (const absl::Status& status : {file_system->Stat(path).status(),
                                     file_system->ReadFile(path, 10).status(),
                                     file_system->ListDirectory(path).status(),
                                     file_system->RealPath(path).status(),
                                     file_system->OpenMapped(path).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
    EXPECT_TRUE(absl::StartsWith(status.message(), path + ": ")) << status;
  }
  EXPECT_FALSE(file_system->IsRegularFile(path));
  EXPECT_FALSE(file_system->IsDirectory(path));
}

TEST(FileSystemTest, WrongKindIsFailedPrecondition) {
  const std::string dir = MakeScratch("kind");
  WriteFile(dir + "/file", "x");
  FileSystem* file_system = FileSystem::Default();
  EXPECT_EQ(file_system->ReadFile(dir, 10).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(file_system->ListDirectory(dir + "/file").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(file_system->OpenMapped(dir).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(file_system->IsDirectory(dir));
  EXPECT_TRUE(file_system->IsRegularFile(dir + "/file"));
}

TEST(FileSystemTest, ListsSortedEntriesFollowingSymlinks) {
  const std::string dir = MakeScratch("list");
  WriteFile(dir + "/b_file", "x");
  mkdir((dir + "/a_dir").c_str(), 0755);
  ASSERT_TRUE(Symlink(dir + "/a_dir", dir + "/c_link"));
  ASSERT_TRUE(Symlink("/nonexistent", dir + "/d_dangling"));
  absl::StatusOr<std::vector<FileSystem::DirectoryEntry>> entries =
      FileSystem::Default()->ListDirectory(dir);
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(*entries, ElementsAre(Entry("a_dir", FileType::kDirectory),
                                    Entry("b_file", FileType::kRegular),
                                    Entry("c_link", FileType::kDirectory),
                                    Entry("d_dangling", FileType::kOther)));
}

TEST(FileSystemTest, RealPathResolvesSymlinksAndDots) {
  const std::string dir = MakeScratch("real");
  mkdir((dir + "/target").c_str(), 0755);
  ASSERT_TRUE(Symlink(dir + "/target", dir + "/link"));
  FileSystem* file_system = FileSystem::Default();
  absl::StatusOr<std::string> real_dir = file_system->RealPath(dir);
  ASSERT_TRUE(real_dir.ok()) << real_dir.status();
  absl::StatusOr<std::string> real = file_system->RealPath(dir + "/link/.");
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(*real, *real_dir + "/target");
}

TEST(FileSystemTest, OpenMappedMapsTheFile) {
  const std::string path = MakeScratch("mapped") + "/file";
  WriteFile(path, "mapped");
  auto file = FileSystem::Default()->OpenMapped(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size_bytes(), 6u);
  EXPECT_EQ(std::memcmp((*file)->data(), "mapped", 6), 0);
}

TEST(FakeFileSystemTest, ServesAnInMemoryTree) {
  FakeFileSystem file_system;
  file_system.AddFile("/repo/model/config.pbtxt", "name: 'model'", 7);
  file_system.AddDirectory("/repo/empty");
  auto entries = file_system.ListDirectory("/repo/");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(*entries, ElementsAre(Entry("empty", FileType::kDirectory),
                                    Entry("model", FileType::kDirectory)));
  EXPECT_EQ(*file_system.ReadFile("/repo/./model/config.pbtxt", 100),
            "name: 'model'");
  EXPECT_EQ(file_system.Stat("/repo/model/config.pbtxt")->mtime_ns, 7);
  EXPECT_EQ(file_system.ReadFile("/repo/model/config.pbtxt", 3).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(file_system.ReadFile("/repo/other", 3).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(file_system.OpenMapped("/repo/model/config.pbtxt").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(FakeFileSystemTest, InjectedFailureHitsEveryOperationOnThePath) {
  FakeFileSystem file_system;
  file_system.AddFile("/etc/key.pem", "secret");
  file_system.FailOn("/etc/key.pem", absl::StatusCode::kPermissionDenied,
                     "cannot open: Permission denied");
  for (const absl::Status& status :
       {file_system.Stat("/etc/key.pem").status(),
        file_system.ReadFile("/etc/key.pem", 100).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(status.message(), "/etc/key.pem: cannot open: Permission denied");
  }
}

TEST(FakeFileSystemTest, FollowsItsSymlinks) {
  FakeFileSystem file_system;
  file_system.AddFile("/elsewhere/weights/config.json", "{}");
  file_system.AddSymlink("/repo/model/weights", "/elsewhere/weights");
  EXPECT_EQ(*file_system.RealPath("/repo/model/weights/config.json"),
            "/elsewhere/weights/config.json");
  EXPECT_EQ(*file_system.ReadFile("/repo/model/weights/config.json", 10), "{}");
  auto entries = file_system.ListDirectory("/repo/model");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT(*entries, ElementsAre(Entry("weights", FileType::kDirectory)));
}

TEST(FakeFileSystemTest, FallsBackToTheRealFileSystem) {
  const std::string path = MakeScratch("fallback") + "/real";
  WriteFile(path, "on disk");
  FakeFileSystem file_system(FileSystem::Default());
  file_system.FailOn("/injected", absl::StatusCode::kInternal, "broken");
  EXPECT_EQ(*file_system.ReadFile(path, 100), "on disk");
  EXPECT_TRUE(file_system.OpenMapped(path).ok());
  EXPECT_EQ(file_system.Stat("/injected").status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace castserve::platform
