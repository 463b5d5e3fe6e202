#include "server/metrics/metrics_exporter.h"

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "server/core/auth.h"
#include "server/core/status_conversion.h"
#include "server/http/http_server.h"

namespace castserve {

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, int port, const HttpServerOptions& http,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    std::function<bool()> is_ready, TokenAuthenticator* auth) {
  std::unique_ptr<MetricsExporter> exporter(
      new MetricsExporter(std::move(collectables), std::move(is_ready)));
  const MetricsExporter* self = exporter.get();
  std::map<std::string, HttpHandler> handlers = {
      {"/metrics",
       [self, auth](const HttpRequest& request) {
         if (auth != nullptr) {
           auto header = request.headers.find("authorization");
           absl::Status allowed = auth->Authorize(
               header == request.headers.end() ? "" : header->second,
               Scope::kMetrics);
           if (!allowed.ok()) {
             return HttpResponse{ToHttpStatusCode(allowed.code()),
                                 "text/plain; charset=utf-8",
                                 absl::StrCat(allowed.message(), "\n"),
                                 {}};
           }
         }
         return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                             self->Scrape()};
       }},
      {"/v2/health/live",
       [](const HttpRequest&) {
         return HttpResponse{200, "text/plain", "live\n"};
       }},
      {"/v2/health/ready",
       [self](const HttpRequest&) {
         return self->is_ready_()
                    ? HttpResponse{200, "text/plain", "ready\n"}
                    : HttpResponse{503, "text/plain", "not ready\n"};
       }},
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(address, port, http, std::move(handlers));
  if (!server.ok()) return server.status();
  exporter->http_ = *std::move(server);
  return exporter;
}

MetricsExporter::MetricsExporter(
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    std::function<bool()> is_ready)
    : collectables_(std::move(collectables)), is_ready_(std::move(is_ready)) {}

MetricsExporter::~MetricsExporter() = default;

int MetricsExporter::port() const { return http_->port(); }

std::string MetricsExporter::Scrape() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : collectables_) {
    std::vector<prometheus::MetricFamily> collected = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(collected.begin()),
                    std::make_move_iterator(collected.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace castserve
