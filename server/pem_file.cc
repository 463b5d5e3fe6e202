#include "server/pem_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
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
                                        const std::string& path, PemKind kind) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Problem(what, path,
                   absl::StrCat("cannot open: ", std::strerror(errno)));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    return Problem(what, path, "not a regular file");
  }
  if (info.st_size > kMaxPemFileBytes) {
    return Problem(what, path,
                   absl::StrCat(info.st_size, " bytes, above the limit of ",
                                kMaxPemFileBytes));
  }
  std::string text(info.st_size, '\0');
  size_t read_bytes = 0;
  while (read_bytes < text.size()) {
    const ssize_t n =
        read(fd, text.data() + read_bytes, text.size() - read_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Problem(what, path,
                     absl::StrCat("cannot read: ", n < 0 ? std::strerror(errno)
                                                         : "file shrank"));
    }
    read_bytes += n;
  }
  if (absl::Status status = CheckBlock(what, path, text, kind); !status.ok()) {
    return status;
  }
  return text;
}

}  // namespace castserve
