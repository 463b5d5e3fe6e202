#ifndef CASTSERVE_SERVER_METRICS_PROCESS_METRICS_H_
#define CASTSERVE_SERVER_METRICS_PROCESS_METRICS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace castserve {

// Resident memory as /proc/self/status reports it.
struct ResidentMemory {
  uint64_t resident_bytes = 0;       // VmRSS
  uint64_t peak_resident_bytes = 0;  // VmHWM
};

// Parses the VmRSS and VmHWM lines of a /proc/<pid>/status text. nullopt if
// either is missing or malformed.
std::optional<ResidentMemory> ParseProcStatusMemory(absl::string_view status);

// Reads /proc/self/status; nullopt where it is unavailable.
std::optional<ResidentMemory> ReadResidentMemory();

// Process-level metrics, computed at scrape time (no background thread):
//   castserve_process_resident_memory_bytes        gauge
//   castserve_process_resident_memory_peak_bytes   gauge (VmHWM)
//   castserve_process_cpu_seconds_total            counter (user + system)
//   castserve_process_start_time_seconds           gauge (Unix time)
//   castserve_uptime_seconds                       gauge
//   castserve_build_info{version,libtorch_version} gauge, always 1
// Thread-safe: Collect only reads the clock and /proc.
class ProcessMetrics : public prometheus::Collectable {
 public:
  explicit ProcessMetrics(absl::Time start_time = absl::Now());

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const absl::Time start_time_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_METRICS_PROCESS_METRICS_H_
