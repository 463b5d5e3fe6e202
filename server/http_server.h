#ifndef CASTSERVE_SERVER_HTTP_SERVER_H_
#define CASTSERVE_SERVER_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/http_server_options.h"

namespace castserve {

struct HttpRequest {
  // "GET" or "HEAD": the only methods that reach a handler.
  std::string method;
  // Without the query string.
  std::string path;
  // By lower-cased name; a header sent more than once has its values joined
  // with ", ".
  std::map<std::string, std::string> headers;
};

struct HttpResponse {
  int status_code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Answers one request for a path. Called from the server's polling threads,
// concurrently: handlers must be thread-safe, and a slow handler delays the
// other connections of its thread.
using HttpHandler = std::function<HttpResponse(const HttpRequest& request)>;

// A small HTTP/1.1 server for fixed paths over GNU libmicrohttpd: GET and
// HEAD only (405 otherwise), 404 for other paths, no request bodies (413),
// optional HTTPS and client certificates. Connections are polled by a few
// threads (epoll), so idle or slow clients hold a connection slot, never a
// thread; `HttpServerLimits` bounds the slots, their memory, their idle time
// and the time a request may take.
class HttpServer {
 public:
  // Binds `address:port` (0 picks a free port) and starts serving.
  // FailedPrecondition naming the address when it cannot be bound;
  // InvalidArgument with libmicrohttpd's reason when the TLS credentials are
  // unusable (a key that does not match the certificate, say).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, int port, const HttpServerOptions& options,
      std::map<std::string, HttpHandler> handlers);

  // Stops accepting, closes every connection, joins the threads. No handler
  // runs once it returns.
  ~HttpServer();

  int port() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_SERVER_H_
