#ifndef CASTSERVE_CASTING_MEMORY_MEMORY_STATS_H_
#define CASTSERVE_CASTING_MEMORY_MEMORY_STATS_H_

#include <cstdint>
#include <string>

namespace castserve::casting {

// Memory counters of one device, the single source metrics and benchmarks
// read. Implemented for CPU by TrackingAllocator (tracking_allocator.h) and
// for CUDA by the caching allocator's device stats (cuda_memory_stats.h).
//
// Units are bytes held by live tensor allocations (not memory reserved by a
// caching allocator). Thread safety: implementations are safe to call
// concurrently; values read while other threads allocate are a snapshot.
class DeviceMemoryStats {
 public:
  virtual ~DeviceMemoryStats() = default;

  // Bytes currently allocated.
  virtual int64_t AllocatedBytes() const = 0;
  // Highest AllocatedBytes() since start or since the last ResetPeak().
  virtual int64_t PeakAllocatedBytes() const = 0;
  // Restarts the peak from the current AllocatedBytes(). Process-wide: it
  // affects every reader of this device's peak.
  virtual void ResetPeak() = 0;
  // "cpu", "cuda:0", ...
  virtual std::string DeviceName() const = 0;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_MEMORY_STATS_H_
