#ifndef CASTSERVE_SERVER_PEM_FILE_H_
#define CASTSERVE_SERVER_PEM_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/file_system.h"

namespace castserve {

// The largest PEM file read: a certificate chain or a CA bundle is far
// smaller.
inline constexpr uint64_t kMaxPemFileBytes = uint64_t{1} << 20;

enum class PemKind {
  // At least one "-----BEGIN CERTIFICATE-----" block.
  kCertificate,
  // An unencrypted private key: PKCS#8 ("BEGIN PRIVATE KEY"), PKCS#1 ("BEGIN
  // RSA PRIVATE KEY") or SEC 1 ("BEGIN EC PRIVATE KEY").
  kPrivateKey,
};

// The text of the PEM file at `path`, which must be a regular file of at most
// kMaxPemFileBytes holding a `kind` block. InvalidArgument otherwise, its
// message starting with `what` (a flag name, say) and the path, and naming
// the problem: cannot be opened (with the system's reason), not a regular
// file, too large, no block of that kind, an encrypted key. The file is read
// through `file_system`.
absl::StatusOr<std::string> ReadPemFile(
    absl::string_view what, const std::string& path, PemKind kind,
    platform::FileSystem* file_system = platform::FileSystem::Default());

}  // namespace castserve

#endif  // CASTSERVE_SERVER_PEM_FILE_H_
