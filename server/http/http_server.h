#ifndef CASTSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define CASTSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_body_stream.h"
#include "server/http/http_server_options.h"

namespace castserve {

struct HttpRequest {
  // As the client sent it: "GET", "HEAD", "POST", ...
  std::string method;
  // Without the query string.
  std::string path;
  // By lower-cased name; a header sent more than once has its values joined
  // with ", ".
  std::map<std::string, std::string> headers;
  // The whole body (HttpService::Handle only; empty in Screen).
  std::string body;

  // The value of the header `lower_case_name`; "" when it was not sent.
  std::string header(const std::string& lower_case_name) const {
    auto it = headers.find(lower_case_name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpResponse {
  int status_code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Further headers, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: the body is streamed (chunked on HTTP/1.1): `body` goes out
  // first, then what is written to the stream until it is closed. Each
  // piece must be taken by the client
  // within the request timeout; the time between pieces is the work's.
  std::shared_ptr<HttpBodyStream> stream;
};

// Gives a request its answer: exactly once, from any thread, inline or
// later.
using HttpReply = std::function<void(HttpResponse response)>;
// True once the client has closed its connection (or the answer was
// given; for a streamed answer, once its stream says ClientGone). Callable
// from any thread, also after the answer.
using HttpClientGone = std::function<bool()>;

// What one HttpServer serves. Thread-safe: the server's polling threads call
// it concurrently. Must outlive the server.
class HttpService {
 public:
  virtual ~HttpService() = default;

  // Called once a request's head is in, before any body is read. A response
  // answers the request at once: its body, if any, stays unread and the
  // connection is closed after the answer. nullopt: the body is read (up to
  // HttpServerLimits::max_body_bytes, 413 beyond) and Handle is called.
  virtual std::optional<HttpResponse> Screen(const HttpRequest& head) = 0;

  // Answers a complete request through `reply`. Must not block: the polling
  // thread serves other connections meanwhile. Work that waits replies
  // later from another thread; the connection is parked until then without
  // holding a thread, and `client_gone` reads true once the client closed
  // it.
  virtual void Handle(HttpRequest request, HttpReply reply,
                      HttpClientGone client_gone) = 0;
};

// Answers one GET or HEAD request of a fixed path, at once.
using HttpHandler = std::function<HttpResponse(const HttpRequest& request)>;

// An HTTP/1.1 server over GNU libmicrohttpd: optional HTTPS and client
// certificates, keep-alive, request bodies up to a limit, and answers given
// later from other threads (a parked connection holds a slot, not a
// thread). Connections are polled by a few threads (epoll), so idle or slow
// clients hold a connection slot, never a thread; `HttpServerLimits` bounds
// the slots, their memory, their idle time and the time a request may take
// to arrive and its answer to leave.
class HttpServer {
 public:
  // Binds `address:port` (0 picks a free port) and starts serving
  // `service` (not owned; it must outlive the server; null serves no path).
  // FailedPrecondition naming the address when it cannot be bound;
  // InvalidArgument with libmicrohttpd's reason when the TLS credentials are
  // unusable (a key that does not match the certificate, say).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, int port, const HttpServerOptions& options,
      HttpService* service);

  // A server of fixed paths: GET and HEAD only (405 otherwise), 404 for
  // other paths, no request bodies (413).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, int port, const HttpServerOptions& options,
      std::map<std::string, HttpHandler> handlers);

  // Waits for every answer still due (StopIntake first, and make the work
  // behind them finish), then stops accepting, closes every connection and
  // joins the threads. No handler runs once it returns.
  ~HttpServer();

  int port() const;

  // From now on every new request is answered 503 at once; answers still
  // due are given as they come.
  void StopIntake();

  // Blocks until no answer is due any more.
  void WaitUntilIdle();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  // `service`, or `owned_service` when it is null.
  static absl::StatusOr<std::unique_ptr<HttpServer>> StartImpl(
      const std::string& address, int port, const HttpServerOptions& options,
      HttpService* service, std::unique_ptr<HttpService> owned_service);

  std::unique_ptr<Impl> impl_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_HTTP_SERVER_H_
