
#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/metrics/metrics_exporter.h"
#include "server/metrics/process_metrics.h"
#include "server/test_util/http_client.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

TEST(ProcessMetricsTest, ParsesResidentMemoryFromProcStatus) {
  const std::optional<ResidentMemory> memory = ParseProcStatusMemory(
      "Name:\tcastserve\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads: 3\n");
  ASSERT_TRUE(memory.has_value());
  EXPECT_EQ(memory->resident_bytes, 1024u * 1024);
  EXPECT_EQ(memory->peak_resident_bytes, 2048u * 1024);
}

TEST(ProcessMetricsTest, MissingOrMalformedLinesGiveNothing) {
  EXPECT_FALSE(ParseProcStatusMemory("VmRSS:\t 10 kB\n").has_value());
  EXPECT_FALSE(
      ParseProcStatusMemory("VmRSS: ten kB\nVmHWM: 1 kB\n").has_value());
}

TEST(ProcessMetricsTest, ExportsEveryProcessMetricWithConventions) {
  ProcessMetrics metrics(absl::Now() - absl::Seconds(5));
  const std::string text =
      prometheus::TextSerializer().Serialize(metrics.Collect());
  EXPECT_THAT(
      text, HasSubstr("# TYPE castserve_process_resident_memory_bytes gauge"));
  EXPECT_THAT(
      text,
      HasSubstr("# TYPE castserve_process_resident_memory_peak_bytes gauge"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE castserve_process_cpu_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE castserve_uptime_seconds gauge"));
  EXPECT_THAT(text, HasSubstr("castserve_build_info{libtorch_version=\""));
  EXPECT_THAT(text, HasSubstr("version=\"0.1.0\"} 1"));
  const std::vector<prometheus::MetricFamily> families = metrics.Collect();
  for (const auto& family : families) {
    if (family.name == "castserve_uptime_seconds") {
      EXPECT_GE(family.metric[0].gauge.value, 5.0);
    }
    if (family.name == "castserve_process_resident_memory_bytes") {
      EXPECT_GT(family.metric[0].gauge.value, 1e6);
    }
  }
}

std::string RawRequest(int port, const std::string& request) {
  return test_util::Exchange(port, request);
}

std::string HttpGet(int port, const std::string& path) {
  return RawRequest(port, "GET " + path + " HTTP/1.0\r\n\r\n");
}

TEST(MetricsExporterTest, ServesRegisteredCollectablesOnAFreePort) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start("127.0.0.1", 0, HttpServerOptions{},
                             {std::make_shared<ProcessMetrics>()},
                             [] { return false; });
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  ASSERT_GT((*exporter)->port(), 0);
  const std::string response = HttpGet((*exporter)->port(), "/metrics");
  EXPECT_THAT(response, MatchesRegex("HTTP/1.1 200(.|\n|\r)*"));
  EXPECT_THAT(response, HasSubstr("castserve_process_cpu_seconds_total"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; version=0.0.4"));
}

TEST(MetricsExporterTest, ServesHealthPathsAndRejectsOthers) {
  std::atomic<bool> ready{false};
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start("127.0.0.1", 0, HttpServerOptions{}, {},
                             [&ready] { return ready.load(); });
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  EXPECT_THAT(HttpGet(port, "/v2/health/live"),
              MatchesRegex("HTTP/1.1 200(.|\n|\r)*"));
  EXPECT_THAT(HttpGet(port, "/v2/health/ready"),
              MatchesRegex("HTTP/1.1 503(.|\n|\r)*"));
  ready = true;
  EXPECT_THAT(HttpGet(port, "/v2/health/ready"),
              MatchesRegex("HTTP/1.1 200(.|\n|\r)*"));
  EXPECT_THAT(HttpGet(port, "/nope"), MatchesRegex("HTTP/1.1 404(.|\n|\r)*"));
}

TEST(MetricsExporterTest, MalformedAndNonGetRequestsGetErrors) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start("127.0.0.1", 0, HttpServerOptions{}, {},
                             [] { return true; });
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  // libmicrohttpd closes the connection without an answer.
  EXPECT_THAT(RawRequest(port, "garbage\r\n\r\n"),
              Not(MatchesRegex("HTTP/1.1 2(.|\n|\r)*")));
  EXPECT_THAT(RawRequest(port, "POST /metrics HTTP/1.0\r\n\r\n"),
              MatchesRegex("HTTP/1.1 405(.|\n|\r)*"));
  // The server still answers after bad requests.
  EXPECT_THAT(HttpGet(port, "/metrics"),
              MatchesRegex("HTTP/1.1 200(.|\n|\r)*"));
}

TEST(MetricsExporterTest, PortInUseIsAPreciseError) {
  absl::StatusOr<std::unique_ptr<MetricsExporter>> first =
      MetricsExporter::Start("127.0.0.1", 0, HttpServerOptions{}, {},
                             [] { return true; });
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<MetricsExporter>> second =
      MetricsExporter::Start("127.0.0.1", (*first)->port(), HttpServerOptions{},
                             {}, [] { return true; });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr("127.0.0.1:" + std::to_string((*first)->port())));
}

}  // namespace
}  // namespace castserve
