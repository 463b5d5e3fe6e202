#include "casting/formats/safe_copy.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "platform/mapped_file.h"

namespace castserve::casting {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WritePattern(const std::string& name, size_t size_bytes) {
  std::string contents(size_bytes, '\0');
  for (size_t i = 0; i < size_bytes; ++i) contents[i] = static_cast<char>(i);
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

TEST(SafeCopyTest, CopiesMappedBytes) {
  auto file = platform::MappedFile::Open(WritePattern("copy", 10000));
  ASSERT_TRUE(file.ok());
  std::vector<uint8_t> out(5000);
  ASSERT_TRUE(CopyFromMapping(out.data(), (*file)->data() + 3, 5000).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], static_cast<uint8_t>(i + 3));
  }
}

TEST(SafeCopyTest, TruncatedFileGivesDataLossAndTheProcessContinues) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::string path = WritePattern("truncated", 64 * page);
  auto file = platform::MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(truncate(path.c_str(), 4 * page), 0);

  std::vector<uint8_t> out(8 * page);
  absl::Status status =
      CopyFromMapping(out.data(), (*file)->data() + 16 * page, 8 * page);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("truncated or replaced"), std::string::npos);

  // A copy straddling the new end faults part way and reports where.
  status = CopyFromMapping(out.data(), (*file)->data() + 2 * page, 4 * page);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(absl::StrCat("byte ", 2 * page)),
            std::string::npos)
      << status;

  // Still alive, and bytes before the new end copy fine.
  ASSERT_TRUE(CopyFromMapping(out.data(), (*file)->data(), 4 * page).ok());
  EXPECT_EQ(out[page + 1], static_cast<uint8_t>(page + 1));
}

TEST(SafeCopyTest, FaultsOnManyThreadsAreEachReported) {
  const long page = sysconf(_SC_PAGESIZE);
  const std::string path = WritePattern("threads", 32 * page);
  auto file = platform::MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(truncate(path.c_str(), page), 0);
  std::vector<absl::StatusCode> codes(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out(4 * page);
      for (int i = 0; i < 50; ++i) {
        codes[t] =
            CopyFromMapping(out.data(), (*file)->data() + (2 + 4 * t) * page,
                            4 * page)
                .code();
        if (codes[t] != absl::StatusCode::kDataLoss) return;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (absl::StatusCode code : codes) {
    EXPECT_EQ(code, absl::StatusCode::kDataLoss);
  }
}

TEST(SafeCopyTest, ZeroBytesIsANoOp) {
  EXPECT_TRUE(CopyFromMapping(nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace castserve::casting
