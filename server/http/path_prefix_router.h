// PathPrefixRouter: one port, several HttpServices by path. A request whose
// path is one of a route's prefixes, or lies under one ("/v1" takes "/v1"
// and "/v1/..."), goes to that route's service; every other request to the
// fallback. The REST port serves KServe v2 as the fallback and the OpenAI
// API under /v1 (server.cc).
//
// Thread-safe; the services must outlive the router, and the router the
// HttpServer that serves it.
#ifndef CASTSERVE_SERVER_HTTP_PATH_PREFIX_ROUTER_H_
#define CASTSERVE_SERVER_HTTP_PATH_PREFIX_ROUTER_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace castserve {

class PathPrefixRouter : public HttpService {
 public:
  struct Route {
    std::vector<std::string> prefixes;  // Each starts with '/'.
    HttpService* service;               // Not owned.
  };

  PathPrefixRouter(std::vector<Route> routes, HttpService* fallback)
      : routes_(std::move(routes)), fallback_(fallback) {}

  std::optional<HttpResponse> Screen(const HttpRequest& head) override {
    return ServiceOf(head.path)->Screen(head);
  }
  void Handle(HttpRequest request, HttpReply reply,
              HttpClientGone client_gone) override {
    HttpService* service = ServiceOf(request.path);
    service->Handle(std::move(request), std::move(reply),
                    std::move(client_gone));
  }

  // The service that serves `path`.
  HttpService* ServiceOf(absl::string_view path) const;

 private:
  const std::vector<Route> routes_;
  HttpService* const fallback_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_PATH_PREFIX_ROUTER_H_
