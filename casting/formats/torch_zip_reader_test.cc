#include "casting/formats/torch_zip_reader.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "casting/formats/test_util/checkpoint_expectations.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

constexpr char kStateDict[] = "casting/formats/testdata/ckpt_state_dict.bin";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string WriteFile(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

void ExpectError(const absl::Status& status,
                 const std::vector<std::string>& pieces) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& piece : pieces) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(piece));
  }
}

TEST(TorchZipReaderTest, DecodesTheStateDictFixture) {
  auto checkpoint = OpenTorchZip(kStateDict);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->tensors().size(), 8u);
  EXPECT_EQ(
      test_util::ExpectTensorsMatchFixture(**checkpoint, "ckpt_state_dict.bin"),
      8);
}

TEST(TorchZipReaderTest, EntriesPointIntoTheFileWithoutCopying) {
  auto checkpoint = OpenTorchZip(kStateDict);
  ASSERT_TRUE(checkpoint.ok());
  const std::string bytes = ReadFile(kStateDict);
  for (const TensorEntry& entry : (*checkpoint)->tensors()) {
    absl::Span<const uint8_t> view = (*checkpoint)->Bytes(entry);
    ASSERT_LE(entry.offset_bytes + entry.size_bytes, bytes.size());
    EXPECT_EQ(view.data(), (*checkpoint)->file(0).data() + entry.offset_bytes);
    EXPECT_EQ(
        std::string(reinterpret_cast<const char*>(view.data()), view.size()),
        bytes.substr(entry.offset_bytes, entry.size_bytes))
        << entry.name;
  }
}

TEST(TorchZipReaderTest, TiedWeightsShareBytes) {
  auto checkpoint = OpenTorchZip(kStateDict);
  ASSERT_TRUE(checkpoint.ok());
  const TensorEntry* proj = (*checkpoint)->Find("proj.weight");
  const TensorEntry* tied = (*checkpoint)->Find("tied.weight");
  ASSERT_NE(proj, nullptr);
  ASSERT_NE(tied, nullptr);
  EXPECT_EQ(proj->offset_bytes, tied->offset_bytes);
  // A view at an element offset into a shared storage.
  EXPECT_EQ((*checkpoint)->Find("shared.tail")->offset_bytes,
            (*checkpoint)->Find("shared.head")->offset_bytes + 8);
}

TEST(TorchZipReaderTest, NonContiguousTensorIsAPreciseError) {
  ExpectError(
      OpenTorchZip("casting/formats/testdata/ckpt_noncontiguous.pt").status(),
      {"ckpt_noncontiguous.pt", "tensor 't'", "not contiguous",
       "stride [1, 3]"});
}

TEST(TorchZipReaderTest, UnknownGlobalIsAnErrorNotACrash) {
  ExpectError(
      OpenTorchZip("casting/formats/testdata/ckpt_bad_global.pt").status(),
      {"ckpt_bad_global.pt", "unsupported global fractions.Fraction"});
}

TEST(TorchZipReaderTest, SafetensorsFileIsNotAZipArchive) {
  ExpectError(
      OpenTorchZip("casting/formats/testdata/ckpt_mixed.safetensors").status(),
      {"ckpt_mixed.safetensors", "no end-of-central-directory"});
}

TEST(TorchZipReaderTest, TruncatedArchiveIsAnError) {
  const std::string bytes = ReadFile(kStateDict);
  for (size_t keep : {size_t{10}, bytes.size() / 2, bytes.size() - 30}) {
    const std::string path = WriteFile(
        "truncated_" + std::to_string(keep) + ".bin", bytes.substr(0, keep));
    absl::Status status = OpenTorchZip(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  }
}

TEST(TorchZipReaderTest, CorruptPickleIsAnError) {
  std::string bytes = ReadFile(kStateDict);
  const size_t pickle = bytes.find("data.pkl");
  ASSERT_NE(pickle, std::string::npos);
  // Overwrite the start of data.pkl's contents (after its local header).
  const size_t data = bytes.find('\x80', pickle);
  ASSERT_NE(data, std::string::npos);
  bytes.replace(data, 8, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  ExpectError(OpenTorchZip(WriteFile("corrupt.bin", bytes)).status(),
              {"corrupt.bin", "data.pkl byte 0"});
}

TEST(TorchZipReaderTest, CompressedRecordIsRejected) {
  std::string bytes = ReadFile(kStateDict);
  // Mark the first central-directory entry as deflated (method 8).
  const size_t entry = bytes.find("PK\x01\x02");
  ASSERT_NE(entry, std::string::npos);
  bytes[entry + 10] = 8;
  ExpectError(OpenTorchZip(WriteFile("compressed.bin", bytes)).status(),
              {"compressed.bin", "is compressed (method 8)"});
}

}  // namespace
}  // namespace castserve::casting
