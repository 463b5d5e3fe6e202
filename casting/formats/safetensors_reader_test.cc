#include "casting/formats/safetensors_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "casting/formats/test_util/checkpoint_expectations.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve::casting {
namespace {

using test_util::HeaderTensor;
using test_util::MakeHeaderJson;
using test_util::WriteSafetensorsFile;
using test_util::WriteTextFile;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Writes a file with `tensors` over `data_bytes` zero bytes and opens it.
absl::StatusOr<std::unique_ptr<Checkpoint>> WriteAndOpen(
    const std::string& name, const std::vector<HeaderTensor>& tensors,
    size_t data_bytes) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteSafetensorsFile(path, MakeHeaderJson(tensors),
                                   std::string(data_bytes, '\0'))
                  .ok());
  return OpenSafetensors(path);
}

// Fails with `code` and a message holding every piece of `pieces`.
void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& pieces) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& piece : pieces) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(piece));
  }
}

TEST(SafetensorsReaderTest, DecodesEveryDtypeOfTheMixedFixture) {
  auto checkpoint =
      OpenSafetensors("casting/formats/testdata/ckpt_mixed.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->tensors().size(), 14u);
  EXPECT_EQ(test_util::ExpectTensorsMatchFixture(**checkpoint,
                                                 "ckpt_mixed.safetensors"),
            14);
  EXPECT_EQ((*checkpoint)->metadata().at("note"), "castserve fixture");
  EXPECT_EQ((*checkpoint)->metadata().at("format"), "pt");
}

TEST(SafetensorsReaderTest, UnalignedTensorIsExposedAsBytes) {
  auto checkpoint =
      OpenSafetensors("casting/formats/testdata/ckpt_mixed.safetensors");
  ASSERT_TRUE(checkpoint.ok());
  const TensorEntry* entry = (*checkpoint)->Find("f32_unaligned");
  ASSERT_NE(entry, nullptr);
  EXPECT_NE(entry->offset_bytes % 4, 0u);
  absl::Span<const uint8_t> bytes = (*checkpoint)->Bytes(*entry);
  EXPECT_EQ(bytes.size(), 24u);
  float first;
  std::memcpy(&first, bytes.data(), sizeof(first));
  EXPECT_EQ(first, 1.5f);
}

TEST(SafetensorsReaderTest, OpensAShardedSetFromItsIndex) {
  auto checkpoint =
      OpenSafetensorsIndex("casting/formats/testdata/ckpt_sharded.index.json");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->file_count(), 2);
  EXPECT_EQ(test_util::ExpectTensorsMatchFixture(**checkpoint,
                                                 "ckpt_sharded.index.json"),
            3);
  EXPECT_EQ((*checkpoint)->Find("lm_head")->file_index, 1);
  EXPECT_EQ((*checkpoint)->metadata().at("total_size"), "30");
  EXPECT_EQ((*checkpoint)->metadata().at("format"), "pt");
}

TEST(SafetensorsReaderTest, OpeningAMultiGigabyteFileReadsTheHeaderOnly) {
  constexpr uint64_t kFileBytes = uint64_t{4} << 30;
  constexpr uint64_t kTensorBytes = uint64_t{256} << 20;  // 16 x 256 MiB.
  std::vector<HeaderTensor> tensors;
  for (int i = 0; i < 16; ++i) {
    tensors.push_back({"layer" + std::to_string(i),
                       "BF16",
                       {8192, 16384},
                       i * kTensorBytes,
                       (i + 1) * kTensorBytes});
  }
  const std::string path = TempPath("sparse_4g.safetensors");
  const std::string header = MakeHeaderJson(tensors);
  ASSERT_TRUE(WriteSafetensorsFile(path, header, "",
                                   8 + header.size() + 16 * kTensorBytes)
                  .ok());
  // Drop whatever the write left in the page cache.
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);

  auto checkpoint = OpenSafetensors(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const platform::MappedFile& file = (*checkpoint)->file(0);
  ASSERT_GE(file.size_bytes(), kFileBytes);
  const uint64_t data_start = (*checkpoint)->tensors()[0].offset_bytes;
  absl::StatusOr<uint64_t> resident =
      file.ResidentBytes(data_start, file.size_bytes() - data_start);
  ASSERT_TRUE(resident.ok());
  EXPECT_LT(*resident, uint64_t{1} << 20);
  // Copying a tensor out does fault its pages in: the check above can fail.
  const TensorEntry& last = (*checkpoint)->tensors().back();
  std::vector<uint8_t> out(1 << 20);
  TensorEntry head = last;
  head.size_bytes = out.size();
  head.shape = {static_cast<int64_t>(out.size() / 2)};
  ASSERT_TRUE((*checkpoint)->CopyTo(head, absl::MakeSpan(out)).ok());
  EXPECT_GE(*file.ResidentBytes(last.offset_bytes, out.size()),
            uint64_t{1} << 20);
}

TEST(SafetensorsReaderTest, FileShorterThanTheLengthPrefixIsTruncated) {
  const std::string path = TempPath("short.safetensors");
  ASSERT_TRUE(WriteTextFile(path, "abc").ok());
  ExpectError(OpenSafetensors(path).status(),
              absl::StatusCode::kInvalidArgument, {path, "truncated"});
}

TEST(SafetensorsReaderTest, HeaderLengthBeyondTheFileIsAnError) {
  const std::string path = TempPath("long_header.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, "{}", "").ok());
  std::string contents(8, '\0');
  contents[0] = 100;
  ASSERT_TRUE(WriteTextFile(path, contents + "{}").ok());
  ExpectError(OpenSafetensors(path).status(),
              absl::StatusCode::kInvalidArgument,
              {path, "header length 100 runs past the end"});
}

TEST(SafetensorsReaderTest, HeaderOverOneHundredMegabytesIsRejected) {
  const std::string path = TempPath("huge_header.safetensors");
  std::string contents(8, '\0');
  const uint64_t length = 200 * 1000 * 1000;
  for (int i = 0; i < 8; ++i)
    contents[i] = static_cast<char>(length >> (8 * i));
  ASSERT_TRUE(WriteTextFile(path, contents).ok());
  ASSERT_EQ(truncate(path.c_str(), 8 + length), 0);
  ExpectError(OpenSafetensors(path).status(),
              absl::StatusCode::kInvalidArgument,
              {path, "header of 200000000 bytes exceeds the limit"});
}

TEST(SafetensorsReaderTest, InvalidJsonIsAnError) {
  const std::string path = TempPath("bad_json.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, "{\"a\": {\"dtype\": }", "").ok());
  ExpectError(OpenSafetensors(path).status(),
              absl::StatusCode::kInvalidArgument,
              {path, "invalid JSON at byte 16"});
}

TEST(SafetensorsReaderTest, UnknownDtypeIsNamed) {
  ExpectError(
      WriteAndOpen("dtype.safetensors", {{"w", "F12", {2}, 0, 4}}, 4).status(),
      absl::StatusCode::kInvalidArgument,
      {"dtype.safetensors", "tensor 'w'", "unknown dtype 'F12'"});
}

TEST(SafetensorsReaderTest, ByteSizeMustMatchShapeAndDtype) {
  ExpectError(
      WriteAndOpen("mismatch.safetensors", {{"w", "F32", {2, 3}, 0, 20}}, 24)
          .status(),
      absl::StatusCode::kInvalidArgument,
      {"mismatch.safetensors", "tensor 'w'", "needs 24 bytes", "holds 20"});
}

TEST(SafetensorsReaderTest, SubByteDtypesNeedWholeBytes) {
  EXPECT_TRUE(
      WriteAndOpen("f4.safetensors", {{"w", "F4", {2, 3}, 0, 3}}, 3).ok());
  ExpectError(
      WriteAndOpen("f4_odd.safetensors", {{"w", "F4", {3}, 0, 2}}, 2).status(),
      absl::StatusCode::kInvalidArgument,
      {"tensor 'w'", "not a whole byte count"});
}

TEST(SafetensorsReaderTest, OffsetsPastTheEndAreOutOfRange) {
  ExpectError(
      WriteAndOpen("bounds.safetensors", {{"w", "U8", {8}, 4, 12}}, 8).status(),
      absl::StatusCode::kOutOfRange,
      {"bounds.safetensors", "tensor 'w'", "run past the end of the data"});
}

TEST(SafetensorsReaderTest, OffsetsEndingBeforeTheyBeginAreAnError) {
  ExpectError(WriteAndOpen("reversed.safetensors", {{"w", "U8", {0}, 4, 2}}, 8)
                  .status(),
              absl::StatusCode::kInvalidArgument,
              {"tensor 'w'", "before begin"});
}

TEST(SafetensorsReaderTest, OverlappingTensorsAreAnError) {
  ExpectError(
      WriteAndOpen("overlap.safetensors",
                   {{"a", "F32", {2}, 0, 8}, {"b", "U8", {4}, 6, 10}}, 10)
          .status(),
      absl::StatusCode::kInvalidArgument,
      {"overlap.safetensors", "tensors 'a' and 'b' overlap"});
}

TEST(SafetensorsReaderTest, DuplicateNamesAreAnError) {
  ExpectError(WriteAndOpen("duplicate.safetensors",
                           {{"a", "U8", {2}, 0, 2}, {"a", "U8", {2}, 2, 4}}, 4)
                  .status(),
              absl::StatusCode::kInvalidArgument,
              {"duplicate.safetensors", "duplicate key \"a\""});
}

TEST(SafetensorsReaderTest, MetadataValuesMustBeStrings) {
  const std::string path = TempPath("metadata.safetensors");
  ASSERT_TRUE(
      WriteSafetensorsFile(path, "{\"__metadata__\":{\"epoch\":3}}", "").ok());
  ExpectError(OpenSafetensors(path).status(),
              absl::StatusCode::kInvalidArgument,
              {"__metadata__ value of \"epoch\" must be a string"});
}

// Writes shards a.safetensors (tensor x) and b.safetensors (tensor y).
void WriteTwoShards(const std::string& prefix) {
  ASSERT_TRUE(WriteSafetensorsFile(TempPath(prefix + "a.safetensors"),
                                   MakeHeaderJson({{"x", "U8", {2}, 0, 2}}),
                                   "ab")
                  .ok());
  ASSERT_TRUE(WriteSafetensorsFile(TempPath(prefix + "b.safetensors"),
                                   MakeHeaderJson({{"y", "U8", {1}, 0, 1},
                                                   {"x", "U8", {1}, 1, 2}}),
                                   "cd")
                  .ok());
}

TEST(SafetensorsReaderTest, MissingShardIsNamed) {
  const std::string index = TempPath("missing.index.json");
  ASSERT_TRUE(
      WriteTextFile(index, "{\"weight_map\":{\"x\":\"nowhere.safetensors\"}}")
          .ok());
  ExpectError(OpenSafetensorsIndex(index).status(), absl::StatusCode::kNotFound,
              {index, "shard nowhere.safetensors cannot be opened"});
}

// The index and the shards are read through the FileSystem given: here an
// in-memory index whose shard cannot be read.
TEST(SafetensorsReaderTest, UnreadableShardIsNamedWithTheReason) {
  platform::FakeFileSystem file_system;
  const std::string index = "/ckpt/model.safetensors.index.json";
  file_system.AddFile(index, "{\"weight_map\":{\"x\":\"a.safetensors\"}}");
  file_system.FailOn("/ckpt/a.safetensors", absl::StatusCode::kPermissionDenied,
                     "cannot open: Permission denied");
  ExpectError(OpenSafetensorsIndex(index, &file_system).status(),
              absl::StatusCode::kNotFound,
              {index, "shard a.safetensors cannot be opened",
               "/ckpt/a.safetensors: cannot open: Permission denied"});
}

TEST(SafetensorsReaderTest, TensorInTwoShardsIsAnError) {
  WriteTwoShards("conflict_");
  const std::string index = TempPath("conflict.index.json");
  ASSERT_TRUE(WriteTextFile(index,
                            "{\"weight_map\":{\"x\":\"conflict_a.safetensors\","
                            "\"y\":\"conflict_b.safetensors\"}}")
                  .ok());
  ExpectError(OpenSafetensorsIndex(index).status(),
              absl::StatusCode::kInvalidArgument,
              {"conflict_b.safetensors", "tensor 'x'",
               "index maps it to conflict_a.safetensors"});
}

TEST(SafetensorsReaderTest, IndexEntryMissingFromItsShardIsAnError) {
  WriteTwoShards("absent_");
  const std::string index = TempPath("absent.index.json");
  ASSERT_TRUE(WriteTextFile(index,
                            "{\"weight_map\":{\"x\":\"absent_a.safetensors\","
                            "\"z\":\"absent_a.safetensors\"}}")
                  .ok());
  ExpectError(OpenSafetensorsIndex(index).status(),
              absl::StatusCode::kInvalidArgument,
              {index, "tensor 'z'", "does not contain it"});
}

TEST(SafetensorsReaderTest, ShardOutsideTheIndexFolderIsRefused) {
  const std::string index = TempPath("escape.index.json");
  ASSERT_TRUE(
      WriteTextFile(index, "{\"weight_map\":{\"x\":\"../etc/passwd\"}}").ok());
  ExpectError(OpenSafetensorsIndex(index).status(),
              absl::StatusCode::kInvalidArgument,
              {index, "shard name '../etc/passwd'", "tensor 'x'"});
}

TEST(SafetensorsReaderTest, IndexWithoutWeightMapIsAnError) {
  const std::string index = TempPath("no_map.index.json");
  ASSERT_TRUE(WriteTextFile(index, "{\"metadata\":{}}").ok());
  ExpectError(OpenSafetensorsIndex(index).status(),
              absl::StatusCode::kInvalidArgument,
              {index, "needs a \"weight_map\" object"});
}

TEST(SafetensorsReaderTest, CopyAfterTheFileShrankIsDataLossNotACrash) {
  const std::string path = TempPath("shrinks.safetensors");
  const std::string header =
      MakeHeaderJson({{"w", "U8", {1 << 20}, 0, 1 << 20}});
  ASSERT_TRUE(
      WriteSafetensorsFile(path, header, std::string(1 << 20, 'w')).ok());
  auto checkpoint = OpenSafetensors(path);
  ASSERT_TRUE(checkpoint.ok());
  ASSERT_EQ(truncate(path.c_str(), 4096), 0);
  const TensorEntry* entry = (*checkpoint)->Find("w");
  std::vector<uint8_t> out(entry->size_bytes);
  ExpectError((*checkpoint)->CopyTo(*entry, absl::MakeSpan(out)),
              absl::StatusCode::kDataLoss,
              {path, "tensor 'w'", "truncated or replaced"});
}

}  // namespace
}  // namespace castserve::casting
