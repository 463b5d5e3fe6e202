#ifndef CASTSERVE_CASTING_FUZZ_FUZZ_UTIL_H_
#define CASTSERVE_CASTING_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace castserve::casting::fuzz {

// An in-memory file holding the fuzz input, openable by path; closed on
// destruction. The readers under test open files by path.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size)
      : fd_(memfd_create("fuzz_input", 0)) {
    size_t written = 0;
    while (fd_ >= 0 && written < size) {
      const ssize_t n = write(fd_, data + written, size - written);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() {
    if (fd_ >= 0) close(fd_);
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace castserve::casting::fuzz

#endif  // CASTSERVE_CASTING_FUZZ_FUZZ_UTIL_H_
