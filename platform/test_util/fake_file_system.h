#ifndef CASTSERVE_PLATFORM_TEST_UTIL_FAKE_FILE_SYSTEM_H_
#define CASTSERVE_PLATFORM_TEST_UTIL_FAKE_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "platform/file_system.h"

namespace castserve::platform {

// A FileSystem for tests: an in-memory tree of absolute paths, laid over an
// optional real one. Files, directories and symlinks added here answer from
// memory; FailOn makes every operation on a path fail with a chosen error;
// any other path goes to `fallback` (NotFound when there is none). Paths are
// compared after lexical normalisation and after the symlinks added here.
// In-memory files cannot be mapped (OpenMapped is Unimplemented for them).
//
// Thread-safe; `fallback` must outlive the fake.
class FakeFileSystem final : public FileSystem {
 public:
  explicit FakeFileSystem(FileSystem* fallback = nullptr)
      : fallback_(fallback) {}

  // Adds a regular file and every parent directory it needs.
  void AddFile(const std::string& path, std::string contents,
               int64_t mtime_ns = 0);
  // Adds a directory and its parents.
  void AddDirectory(const std::string& path);
  // `link` leads to the absolute `target` (which need not exist).
  void AddSymlink(const std::string& link, const std::string& target);
  // Every operation on `path` fails with `code` and "<path>: <problem>".
  void FailOn(const std::string& path, absl::StatusCode code,
              absl::string_view problem);

  absl::StatusOr<FileInfo> Stat(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path,
                                       uint64_t max_bytes) override;
  absl::StatusOr<std::vector<DirectoryEntry>> ListDirectory(
      const std::string& path) override;
  absl::StatusOr<std::string> RealPath(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<MappedFile>> OpenMapped(
      const std::string& path) override;

 private:
  struct File {
    std::string contents;
    int64_t mtime_ns = 0;
  };

  // `path` normalised, with the symlinks added here resolved.
  std::string Resolve(const std::string& path) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The names directly inside the in-memory directory `resolved`.
  std::set<std::string> ChildrenLocked(const std::string& resolved) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the normalised `path` and its parents.
  void AddDirectoryLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FileSystem* const fallback_;
  mutable absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> directories_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> symlinks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_TEST_UTIL_FAKE_FILE_SYSTEM_H_
