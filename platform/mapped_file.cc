#include "platform/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::platform {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  const int err = errno;
  std::string message = absl::StrCat(path, ": ", what, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

uint64_t PageSize() {
  static const uint64_t page_size =
      static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page_size;
}

}  // namespace

struct MappedFile::Impl {
  std::string path;
  int fd = -1;
  uint8_t* data = nullptr;
  uint64_t size_bytes = 0;

  ~Impl() {
    if (data != nullptr) munmap(data, size_bytes);
    if (fd >= 0) close(fd);
  }

  // Page-aligned [begin, end) covering [offset, offset + length) clamped to
  // the file; begin == end when the range is empty.
  std::pair<uint64_t, uint64_t> PageRange(uint64_t offset,
                                          uint64_t length) const {
    if (offset >= size_bytes) return {0, 0};
    const uint64_t end = offset + std::min(length, size_bytes - offset);
    const uint64_t begin = offset - offset % PageSize();
    return {begin, end};
  }

  absl::Status Advise(uint64_t offset, uint64_t length, int advice) const {
    auto [begin, end] = PageRange(offset, length);
    if (begin == end) return absl::OkStatus();
    if (madvise(data + begin, end - begin, advice) != 0) {
      return ErrnoError("madvise", path);
    }
    return absl::OkStatus();
  }
};

MappedFile::MappedFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MappedFile::~MappedFile() = default;

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(
    const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (impl->fd < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (fstat(impl->fd, &st) != 0) return ErrnoError("cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": not a regular file"));
  }
  impl->size_bytes = static_cast<uint64_t>(st.st_size);
  if (impl->size_bytes > 0) {
    void* mapped =
        mmap(nullptr, impl->size_bytes, PROT_READ, MAP_SHARED, impl->fd, 0);
    if (mapped == MAP_FAILED) return ErrnoError("cannot mmap", path);
    impl->data = static_cast<uint8_t*>(mapped);
  }
  return std::unique_ptr<MappedFile>(new MappedFile(std::move(impl)));
}

const std::string& MappedFile::path() const { return impl_->path; }
uint64_t MappedFile::size_bytes() const { return impl_->size_bytes; }
const uint8_t* MappedFile::data() const { return impl_->data; }
int MappedFile::fd() const { return impl_->fd; }

absl::Status MappedFile::ReadAt(uint64_t offset, uint64_t length,
                                void* out) const {
  auto* dst = static_cast<char*>(out);
  while (length > 0) {
    const ssize_t n = pread(impl_->fd, dst, length, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot read", impl_->path);
    if (n == 0) {
      return absl::OutOfRangeError(absl::StrCat(
          impl_->path, ": unexpected end of file at byte ", offset));
    }
    dst += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status MappedFile::AdviseWillNeed(uint64_t offset,
                                        uint64_t length) const {
  return impl_->Advise(offset, length, MADV_WILLNEED);
}

absl::Status MappedFile::AdviseDontNeed(uint64_t offset,
                                        uint64_t length) const {
  return impl_->Advise(offset, length, MADV_DONTNEED);
}

absl::StatusOr<uint64_t> MappedFile::ResidentBytes(uint64_t offset,
                                                   uint64_t length) const {
  auto [begin, end] = impl_->PageRange(offset, length);
  if (begin == end) return uint64_t{0};
  const uint64_t pages = (end - begin + PageSize() - 1) / PageSize();
  std::vector<unsigned char> residency(pages);
  if (mincore(impl_->data + begin, end - begin, residency.data()) != 0) {
    return ErrnoError("mincore", impl_->path);
  }
  uint64_t resident_pages = 0;
  for (unsigned char page : residency) resident_pages += page & 1;
  return resident_pages * PageSize();
}

}  // namespace castserve::platform
