#include "platform/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace castserve::platform {
namespace {

// The status for `errno` after `what` failed on `path`, by the contract in
// file_system.h.
absl::Status ErrnoError(const std::string& path, const char* what) {
  const int err = errno;
  const std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

FileSystem::FileType TypeOf(const struct stat& info) {
  if (S_ISREG(info.st_mode)) return FileSystem::FileType::kRegular;
  if (S_ISDIR(info.st_mode)) return FileSystem::FileType::kDirectory;
  return FileSystem::FileType::kOther;
}

FileSystem::FileInfo InfoOf(const struct stat& info) {
  return {TypeOf(info), static_cast<uint64_t>(info.st_size),
          int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec};
}

// Reads exactly `size_bytes` from `fd`; DataLoss when the file is shorter.
absl::StatusOr<std::string> ReadExactly(int fd, const std::string& path,
                                        uint64_t size_bytes) {
  std::string text(size_bytes, '\0');
  size_t read_bytes = 0;
  while (read_bytes < text.size()) {
    const ssize_t n =
        read(fd, text.data() + read_bytes, text.size() - read_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(path, "cannot read");
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot read: file shrank"));
    }
    read_bytes += static_cast<size_t>(n);
  }
  return text;
}

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<FileInfo> Stat(const std::string& path) override {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return ErrnoError(path, "cannot stat");
    }
    return InfoOf(info);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path,
                                       uint64_t max_bytes) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError(path, "cannot open");
    absl::Cleanup close_fd = [fd] { close(fd); };
    struct stat info {};
    if (fstat(fd, &info) != 0) return ErrnoError(path, "cannot stat");
    if (!S_ISREG(info.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": not a regular file"));
    }
    const uint64_t size_bytes = static_cast<uint64_t>(info.st_size);
    if (size_bytes > max_bytes) {
      return absl::OutOfRangeError(absl::StrCat(
          path, ": ", size_bytes, " bytes, above the limit of ", max_bytes));
    }
    return ReadExactly(fd, path, size_bytes);
  }

  absl::StatusOr<std::vector<DirectoryEntry>> ListDirectory(
      const std::string& path) override {
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr) {
      if (errno == ENOTDIR) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": not a directory"));
      }
      return ErrnoError(path, "cannot list");
    }
    absl::Cleanup close_dir = [dir] { closedir(dir); };
    std::vector<DirectoryEntry> entries;
    errno = 0;
    while (const struct dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      struct stat info {};
      const bool known = fstatat(dirfd(dir), name.c_str(), &info, 0) == 0;
      entries.push_back({name, known ? TypeOf(info) : FileType::kOther});
      errno = 0;
    }
    if (errno != 0) return ErrnoError(path, "cannot list");
    std::sort(entries.begin(), entries.end(),
              [](const DirectoryEntry& a, const DirectoryEntry& b) {
                return a.name < b.name;
              });
    return entries;
  }

  absl::StatusOr<std::string> RealPath(const std::string& path) override {
    char* resolved = realpath(path.c_str(), nullptr);
    if (resolved == nullptr) return ErrnoError(path, "cannot resolve");
    std::string real(resolved);
    std::free(resolved);
    return real;
  }

  absl::StatusOr<std::unique_ptr<MappedFile>> OpenMapped(
      const std::string& path) override {
    return MappedFile::Open(path);
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static FileSystem* const file_system = new PosixFileSystem();
  return file_system;
}

bool FileSystem::IsRegularFile(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  return info.ok() && info->type == FileType::kRegular;
}

bool FileSystem::IsDirectory(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  return info.ok() && info->type == FileType::kDirectory;
}

}  // namespace castserve::platform
