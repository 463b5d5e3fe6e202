// The file system as a seam (LevelDB's Env in spirit): every file the daemon
// reads because of a flag, a config or a request goes through this small
// interface, so that tests can run on an in-memory tree or inject a failure
// (platform/test_util/fake_file_system.h) and production code has one place
// where paths meet the operating system.
#ifndef CASTSERVE_PLATFORM_FILE_SYSTEM_H_
#define CASTSERVE_PLATFORM_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "platform/mapped_file.h"

namespace castserve::platform {

// Contract of every implementation:
//
// Thread safety: all methods may be called concurrently from any thread.
//
// Paths: as the caller gives them (relative to the working directory or
// absolute); symlinks are followed everywhere except where a method says.
//
// Errors: an absl::Status whose message starts with the path
// ("<path>: <problem>", e.g. "/etc/x.pem: cannot open: Permission denied"),
// so that a caller can prefix its own context ("--cert=") and keep the code:
//   NotFound            the path (or a component of it) does not exist;
//   PermissionDenied    the operating system refused access;
//   FailedPrecondition  the path exists but is the wrong kind (not a regular
//                       file, not a directory);
//   OutOfRange          a file holds more than the caller's limit;
//   DataLoss            a file changed size while it was read;
//   Internal            any other operating-system error.
class FileSystem {
 public:
  enum class FileType { kRegular, kDirectory, kOther };

  struct FileInfo {
    FileType type = FileType::kOther;
    uint64_t size_bytes = 0;
    // Last modification, in nanoseconds since the epoch.
    int64_t mtime_ns = 0;
  };

  struct DirectoryEntry {
    std::string name;
    // The type of what the entry leads to (symlinks followed); kOther for a
    // dangling symlink or an entry that cannot be examined.
    FileType type = FileType::kOther;
  };

  // The real (POSIX) file system. Never null; lives for the whole process.
  static FileSystem* Default();

  virtual ~FileSystem() = default;

  // What `path` is, its size and modification time.
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path) = 0;

  // The whole content of the regular file `path`, refused (OutOfRange)
  // before anything is read when it holds more than `max_bytes`.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path,
                                               uint64_t max_bytes) = 0;

  // The entries of directory `path` without "." and "..", sorted by name.
  virtual absl::StatusOr<std::vector<DirectoryEntry>> ListDirectory(
      const std::string& path) = 0;

  // The absolute path of `path` with every symlink, "." and ".." resolved.
  virtual absl::StatusOr<std::string> RealPath(const std::string& path) = 0;

  // A read-only mapping of the regular file `path` (MappedFile's contract).
  virtual absl::StatusOr<std::unique_ptr<MappedFile>> OpenMapped(
      const std::string& path) = 0;

  // Whether `path` exists and is a regular file / a directory; false on any
  // error.
  bool IsRegularFile(const std::string& path);
  bool IsDirectory(const std::string& path);
};

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_FILE_SYSTEM_H_
