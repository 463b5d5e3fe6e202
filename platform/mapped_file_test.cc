#include "platform/mapped_file.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace castserve::platform {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

TEST(MappedFileTest, MapsTheFileContents) {
  const std::string path = WriteFile("contents", "hello mapped world");
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  ASSERT_EQ((*file)->size_bytes(), 18u);
  EXPECT_EQ(std::memcmp((*file)->data(), "hello mapped world", 18), 0);
}

TEST(MappedFileTest, MissingFileIsNotFound) {
  auto file = MappedFile::Open(TempPath("does_not_exist"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("does_not_exist"), std::string::npos);
}

TEST(MappedFileTest, EmptyFileMapsToNothing) {
  auto file = MappedFile::Open(WriteFile("empty", ""));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size_bytes(), 0u);
  EXPECT_EQ((*file)->data(), nullptr);
  EXPECT_EQ(*(*file)->ResidentBytes(0, 100), 0u);
}

TEST(MappedFileTest, DirectoryIsRejected) {
  auto file = MappedFile::Open(TempPath(""));
  EXPECT_FALSE(file.ok());
}

TEST(MappedFileTest, ReadAtReadsWithoutTheMappingAndStopsAtTheEnd) {
  auto file = MappedFile::Open(WriteFile("read_at", "0123456789"));
  ASSERT_TRUE(file.ok());
  char out[4] = {};
  ASSERT_TRUE((*file)->ReadAt(3, 4, out).ok());
  EXPECT_EQ(std::string(out, 4), "3456");
  EXPECT_EQ((*file)->ReadAt(8, 4, out).code(), absl::StatusCode::kOutOfRange);
}

TEST(MappedFileTest, ResidentBytesFollowTouchesAndAdvice) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::string path = TempPath("sparse");
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "x"; }
  ASSERT_EQ(truncate(path.c_str(), 256 * page), 0);
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  const uint64_t size = (*file)->size_bytes();
  // Pages of a sparse file nobody read are not resident.
  const uint64_t before = *(*file)->ResidentBytes(page, size);
  EXPECT_LT(before, static_cast<uint64_t>(16 * page));
  volatile uint8_t sink = 0;
  for (int i = 100; i < 110; ++i) sink += (*file)->data()[i * page];
  EXPECT_GE(*(*file)->ResidentBytes(100 * page, 10 * page),
            static_cast<uint64_t>(10 * page));
  ASSERT_TRUE((*file)->AdviseWillNeed(0, size).ok());
  ASSERT_TRUE((*file)->AdviseDontNeed(0, size).ok());
  // Clamped: a range past the end is no error and counts nothing.
  EXPECT_EQ(*(*file)->ResidentBytes(size + 1, 10), 0u);
}

}  // namespace
}  // namespace castserve::platform
