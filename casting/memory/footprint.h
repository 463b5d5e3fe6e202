#ifndef CASTSERVE_CASTING_MEMORY_FOOTPRINT_H_
#define CASTSERVE_CASTING_MEMORY_FOOTPRINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/string_view.h"

namespace castserve::casting {

// How much memory a set of weights takes, by state (docs/ARCHITECTURE.md, "The
// weight lifecycle"): bytes left mapped from the checkpoint, bytes resident in
// each storage format, bytes of cached compute copies, and bytes of transient
// compute copies alive when the report was taken. All values in bytes, never
// negative.
//
// A plain value type: copyable, comparable, summable (reports of several
// weights or models merge with +=). Not thread-safe; copy it to share.
class Footprint {
 public:
  Footprint() = default;

  // Each `bytes` must be >= 0. Adding to a format that is absent creates it.
  void AddMapped(int64_t bytes);
  // `format` names a storage format, e.g. "bf16" or "f8_e4m3fn/per_row";
  // must not be empty.
  void AddResident(absl::string_view format, int64_t bytes);
  void AddCachedCompute(int64_t bytes);
  void AddTransientCompute(int64_t bytes);

  // Bytes still backed by the checkpoint's mapping (page cache, not owned).
  int64_t mapped_bytes() const { return mapped_bytes_; }
  const std::map<std::string, int64_t, std::less<>>& resident_bytes_by_format()
      const {
    return resident_bytes_by_format_;
  }
  // 0 for a format with no resident bytes.
  int64_t resident_bytes(absl::string_view format) const;
  int64_t total_resident_bytes() const;
  int64_t cached_compute_bytes() const { return cached_compute_bytes_; }
  int64_t transient_compute_bytes() const { return transient_compute_bytes_; }
  // Memory the process itself holds for these weights: resident storage and
  // compute copies. Mapped bytes are excluded: the kernel can drop them.
  int64_t owned_bytes() const;

  Footprint& operator+=(const Footprint& other);
  friend Footprint operator+(Footprint a, const Footprint& b) {
    a += b;
    return a;
  }
  friend bool operator==(const Footprint& a, const Footprint& b);
  friend bool operator!=(const Footprint& a, const Footprint& b) {
    return !(a == b);
  }

  // One line, sizes in binary units, formats sorted by name, e.g.
  // "mapped=1.50 MiB resident={bf16=2.00 KiB, f8_e4m3fn=512 B}
  //  cached_compute=0 B transient_compute=0 B".
  std::string ToString() const;

 private:
  int64_t mapped_bytes_ = 0;
  std::map<std::string, int64_t, std::less<>> resident_bytes_by_format_;
  int64_t cached_compute_bytes_ = 0;
  int64_t transient_compute_bytes_ = 0;
};

// "512 B", "2.00 KiB", "1.50 MiB", "3.25 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_FOOTPRINT_H_
