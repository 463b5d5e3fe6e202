#include "server/metrics/process_metrics.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/libtorch_version.h"
#include "server/version.h"

namespace castserve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// "VmRSS:\t  12345 kB" -> 12345 * 1024.
std::optional<uint64_t> ParseKilobytes(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  if (!absl::ConsumeSuffix(&value, "kB")) return std::nullopt;
  uint64_t kilobytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kilobytes)) {
    return std::nullopt;
  }
  return kilobytes * 1024;
}

MetricFamily OneValue(std::string name, std::string help, MetricType type,
                      double value) {
  ClientMetric metric;
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return MetricFamily{std::move(name), std::move(help), type, {metric}};
}

double CpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

std::optional<ResidentMemory> ParseProcStatusMemory(absl::string_view status) {
  std::optional<uint64_t> rss, hwm;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (absl::ConsumePrefix(&line, "VmRSS:")) rss = ParseKilobytes(line);
    if (absl::ConsumePrefix(&line, "VmHWM:")) hwm = ParseKilobytes(line);
  }
  if (!rss || !hwm) return std::nullopt;
  return ResidentMemory{*rss, *hwm};
}

std::optional<ResidentMemory> ReadResidentMemory() {
  std::ifstream file("/proc/self/status");
  if (!file) return std::nullopt;
  std::stringstream text;
  text << file.rdbuf();
  return ParseProcStatusMemory(text.str());
}

ProcessMetrics::ProcessMetrics(absl::Time start_time)
    : start_time_(start_time) {}

std::vector<MetricFamily> ProcessMetrics::Collect() const {
  std::vector<MetricFamily> families;
  if (std::optional<ResidentMemory> memory = ReadResidentMemory()) {
    families.push_back(OneValue("castserve_process_resident_memory_bytes",
                                "Resident set size of the daemon (VmRSS).",
                                MetricType::Gauge, memory->resident_bytes));
    families.push_back(
        OneValue("castserve_process_resident_memory_peak_bytes",
                 "Peak resident set size of the daemon since start (VmHWM).",
                 MetricType::Gauge, memory->peak_resident_bytes));
  }
  families.push_back(OneValue("castserve_process_cpu_seconds_total",
                              "User and system CPU time used by the daemon.",
                              MetricType::Counter, CpuSeconds()));
  families.push_back(
      OneValue("castserve_process_start_time_seconds",
               "Start time of the daemon, seconds since the Unix "
               "epoch.",
               MetricType::Gauge, absl::ToUnixMillis(start_time_) / 1e3));
  families.push_back(OneValue(
      "castserve_uptime_seconds", "Seconds since the daemon started.",
      MetricType::Gauge, absl::ToDoubleSeconds(absl::Now() - start_time_)));
  MetricFamily build =
      OneValue("castserve_build_info",
               "Build information: castserve and LibTorch versions. Always 1.",
               MetricType::Gauge, 1);
  build.metric[0].label = {{"libtorch_version", LibTorchVersion()},
                           {"version", kServerVersion}};
  families.push_back(std::move(build));
  return families;
}

}  // namespace castserve
