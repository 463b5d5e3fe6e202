#ifndef CASTSERVE_SERVER_METRICS_METRICS_EXPORTER_H_
#define CASTSERVE_SERVER_METRICS_METRICS_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "server/http/http_server_options.h"

namespace castserve {

class HttpServer;
class TokenAuthenticator;

// The metrics port: `GET /metrics` in Prometheus text format (0.0.4), and
// the KServe v2 HTTP health paths for Kubernetes httpGet probes:
// `/v2/health/live` (200 while the process answers) and `/v2/health/ready`
// (200 when `is_ready` says so, 503 otherwise).
// Collectables are scraped on each request from the server's threads, so
// they must be thread-safe. Destroying the exporter stops the listener.
class MetricsExporter {
 public:
  // Binds `address:port` (0 picks a free port) and serves with `http`'s
  // limits, over HTTPS when it has TLS credentials. FailedPrecondition with
  // the address when the port cannot be bound (in use, no permission);
  // InvalidArgument when the TLS credentials are unusable. With `auth` (may
  // be null; not owned, outlives the exporter), /metrics needs a bearer
  // token with the `metrics` scope (401/403 otherwise); health never does.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(
      const std::string& address, int port, const HttpServerOptions& http,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      std::function<bool()> is_ready, TokenAuthenticator* auth = nullptr);

  ~MetricsExporter();

  // The port actually bound.
  int port() const;

  // The text a scrape returns now.
  std::string Scrape() const;

 private:
  MetricsExporter(
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      std::function<bool()> is_ready);

  const std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  const std::function<bool()> is_ready_;
  // Last member: stopped first, while the handlers' state is still alive.
  std::unique_ptr<HttpServer> http_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_METRICS_METRICS_EXPORTER_H_
