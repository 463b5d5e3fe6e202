#include "server/pem_file.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace castserve {
namespace {

absl::Status Problem(absl::string_view what, const std::string& path,
                     absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, "=", path, ": ", problem));
}

// Whether `text` holds the block `kind` needs; the problem when not.
absl::Status CheckBlock(absl::string_view what, const std::string& path,
                        const std::string& text, PemKind kind) {
  switch (kind) {
    case PemKind::kCertificate:
      if (!absl::StrContains(text, "-----BEGIN CERTIFICATE-----")) {
        return Problem(what, path,
                       "no PEM certificate (-----BEGIN CERTIFICATE-----)");
      }
      return absl::OkStatus();
    case PemKind::kPrivateKey:
      if (absl::StrContains(text, "-----BEGIN ENCRYPTED PRIVATE KEY-----") ||
          absl::StrContains(text, "Proc-Type: 4,ENCRYPTED")) {
        return Problem(what, path,
                       "the private key is encrypted; give an unencrypted "
                       "one (readable by the daemon only)");
      }
      if (!absl::StrContains(text, "-----BEGIN PRIVATE KEY-----") &&
          !absl::StrContains(text, "-----BEGIN RSA PRIVATE KEY-----") &&
          !absl::StrContains(text, "-----BEGIN EC PRIVATE KEY-----")) {
        return Problem(what, path,
                       "no PEM private key (-----BEGIN PRIVATE KEY-----)");
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view what,
                                        const std::string& path, PemKind kind,
                                        platform::FileSystem* file_system) {
  absl::StatusOr<std::string> text =
      file_system->ReadFile(path, kMaxPemFileBytes);
  if (!text.ok()) {
    // The message starts with the path: "--cert=<path>: <problem>".
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", text.status().message()));
  }
  if (absl::Status status = CheckBlock(what, path, *text, kind); !status.ok()) {
    return status;
  }
  return text;
}

}  // namespace castserve
