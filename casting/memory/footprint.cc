#include "casting/memory/footprint.h"

#include <cassert>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace castserve::casting {

void Footprint::AddMapped(int64_t bytes) {
  assert(bytes >= 0);
  mapped_bytes_ += bytes;
}

void Footprint::AddResident(absl::string_view format, int64_t bytes) {
  assert(bytes >= 0);
  assert(!format.empty());
  auto it = resident_bytes_by_format_.find(format);
  if (it == resident_bytes_by_format_.end()) {
    resident_bytes_by_format_.emplace(std::string(format), bytes);
  } else {
    it->second += bytes;
  }
}

void Footprint::AddCachedCompute(int64_t bytes) {
  assert(bytes >= 0);
  cached_compute_bytes_ += bytes;
}

void Footprint::AddTransientCompute(int64_t bytes) {
  assert(bytes >= 0);
  transient_compute_bytes_ += bytes;
}

int64_t Footprint::resident_bytes(absl::string_view format) const {
  auto it = resident_bytes_by_format_.find(format);
  return it == resident_bytes_by_format_.end() ? 0 : it->second;
}

int64_t Footprint::total_resident_bytes() const {
  int64_t total = 0;
  for (const auto& [format, bytes] : resident_bytes_by_format_) total += bytes;
  return total;
}

int64_t Footprint::owned_bytes() const {
  return total_resident_bytes() + cached_compute_bytes_ +
         transient_compute_bytes_;
}

Footprint& Footprint::operator+=(const Footprint& other) {
  mapped_bytes_ += other.mapped_bytes_;
  for (const auto& [format, bytes] : other.resident_bytes_by_format_) {
    AddResident(format, bytes);
  }
  cached_compute_bytes_ += other.cached_compute_bytes_;
  transient_compute_bytes_ += other.transient_compute_bytes_;
  return *this;
}

bool operator==(const Footprint& a, const Footprint& b) {
  return a.mapped_bytes_ == b.mapped_bytes_ &&
         a.resident_bytes_by_format_ == b.resident_bytes_by_format_ &&
         a.cached_compute_bytes_ == b.cached_compute_bytes_ &&
         a.transient_compute_bytes_ == b.transient_compute_bytes_;
}

std::string Footprint::ToString() const {
  std::string resident = absl::StrJoin(
      resident_bytes_by_format_, ", ", [](std::string* out, const auto& entry) {
        absl::StrAppend(out, entry.first, "=", FormatBytes(entry.second));
      });
  return absl::StrCat(
      "mapped=", FormatBytes(mapped_bytes_), " resident={", resident,
      "} cached_compute=", FormatBytes(cached_compute_bytes_),
      " transient_compute=", FormatBytes(transient_compute_bytes_));
}

std::string FormatBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::llabs(bytes) < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (unit + 1 < 4 && (value >= 1024 || value <= -1024)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

}  // namespace castserve::casting
