#ifndef CASTSERVE_PLATFORM_MAPPED_FILE_H_
#define CASTSERVE_PLATFORM_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace castserve::platform {

// A read-only, shared memory mapping of a whole file (the platform code sits
// behind a pimpl so callers never see mmap/madvise/mincore).
//
// Ownership: the object owns the mapping and the file descriptor; `data()`
// stays valid until it is destroyed. Mapping touches no page: pages are read
// by the kernel only when something dereferences them.
//
// Truncation: if the file shrinks on disk while mapped, dereferencing a page
// past the new end raises SIGBUS. Read mapped bytes through `CopyFromMapping`
// (safe_copy.h) unless the caller handles that itself.
//
// Thread safety: all methods are const and safe to call concurrently.
class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to `data() == nullptr`,
  // `size_bytes() == 0`.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const;
  // File size at the time of `Open`, in bytes.
  uint64_t size_bytes() const;
  const uint8_t* data() const;
  // The open descriptor, for pread-based reads that must not fault.
  int fd() const;

  // Reads [offset, offset + length) with pread into `out` without touching
  // the mapping; an error if the file is shorter now.
  absl::Status ReadAt(uint64_t offset, uint64_t length, void* out) const;

  // madvise hints for the pages covering [offset, offset + length), clamped
  // to the file. WILLNEED starts readahead; DONTNEED drops them from this
  // process (clean pages are re-read from the page cache on the next touch).
  absl::Status AdviseWillNeed(uint64_t offset, uint64_t length) const;
  absl::Status AdviseDontNeed(uint64_t offset, uint64_t length) const;

  // Bytes of the pages covering [offset, offset + length) (clamped to the
  // file) that are resident in memory now, from mincore. Whole pages count,
  // so the result is a multiple of the page size.
  absl::StatusOr<uint64_t> ResidentBytes(uint64_t offset,
                                         uint64_t length) const;

 private:
  struct Impl;
  explicit MappedFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_MAPPED_FILE_H_
