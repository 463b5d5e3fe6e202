#include "server/pem_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;

constexpr char kCertificate[] =
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kKey[] =
    "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(PemFileTest, ReadsACertificateAndAKey) {
  absl::StatusOr<std::string> certificate = ReadPemFile(
      "--cert", WriteTempFile("cert.pem", kCertificate), PemKind::kCertificate);
  ASSERT_TRUE(certificate.ok()) << certificate.status();
  EXPECT_EQ(*certificate, kCertificate);
  absl::StatusOr<std::string> key = ReadPemFile(
      "--key", WriteTempFile("key.pem", kKey), PemKind::kPrivateKey);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, kKey);
}

TEST(PemFileTest, MissingFileNamesTheFlagThePathAndTheReason) {
  absl::StatusOr<std::string> text =
      ReadPemFile("--cert", "/nonexistent/cert.pem", PemKind::kCertificate);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(),
              HasSubstr("--cert=/nonexistent/cert.pem: cannot open: No such "
                        "file or directory"));
}

TEST(PemFileTest, RefusesTheWrongKindOfBlock) {
  absl::StatusOr<std::string> as_key =
      ReadPemFile("--key", WriteTempFile("swapped.pem", kCertificate),
                  PemKind::kPrivateKey);
  ASSERT_FALSE(as_key.ok());
  EXPECT_THAT(as_key.status().message(), HasSubstr("no PEM private key"));
  absl::StatusOr<std::string> as_certificate = ReadPemFile(
      "--cert", WriteTempFile("key_as_cert.pem", kKey), PemKind::kCertificate);
  ASSERT_FALSE(as_certificate.ok());
  EXPECT_THAT(as_certificate.status().message(),
              HasSubstr("no PEM certificate"));
}

TEST(PemFileTest, RefusesEncryptedKeysDirectoriesAndHugeFiles) {
  absl::StatusOr<std::string> encrypted =
      ReadPemFile("--key",
                  WriteTempFile("encrypted.pem",
                                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF\n"
                                "-----END ENCRYPTED PRIVATE KEY-----\n"),
                  PemKind::kPrivateKey);
  ASSERT_FALSE(encrypted.ok());
  EXPECT_THAT(encrypted.status().message(), HasSubstr("encrypted"));

  absl::StatusOr<std::string> directory =
      ReadPemFile("--cert", ::testing::TempDir(), PemKind::kCertificate);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("not a regular file"));

  const std::string huge_path = WriteTempFile("huge.pem", kCertificate);
  ASSERT_EQ(truncate(huge_path.c_str(), kMaxPemFileBytes + 1), 0);
  absl::StatusOr<std::string> huge =
      ReadPemFile("--cert", huge_path, PemKind::kCertificate);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("above the limit of"));
}

TEST(PemFileTest, UnreadableFileNamesTheFlagThePathAndTheReason) {
  platform::FakeFileSystem file_system;
  file_system.AddFile("/etc/castserve/key.pem", kKey);
  file_system.FailOn("/etc/castserve/key.pem",
                     absl::StatusCode::kPermissionDenied,
                     "cannot open: Permission denied");
  absl::StatusOr<std::string> text = ReadPemFile(
      "--key", "/etc/castserve/key.pem", PemKind::kPrivateKey, &file_system);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            "--key=/etc/castserve/key.pem: cannot open: Permission denied");
}

}  // namespace
}  // namespace castserve
