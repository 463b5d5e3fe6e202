#ifndef CASTSERVE_SERVER_HTTP_SERVER_H_
#define CASTSERVE_SERVER_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace castserve {

struct HttpResponse {
  int status_code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Answers one GET for a path. Called from the server's worker threads,
// concurrently: handlers must be thread-safe.
using HttpHandler = std::function<HttpResponse()>;

// A deliberately small HTTP/1.1 server for the metrics port: GET and HEAD on
// fixed paths, one request per connection (Connection: close), requests
// capped at 16 KiB and 5 seconds. Enough for Prometheus scrapes and
// Kubernetes httpGet probes; not a general web server.
//
// Why not prometheus-cpp's Exposer: its civetweb server fails to start
// (mg_start returns NULL after binding) in a process that links Debian's
// LibTorch, which the daemon does.
class HttpServer {
 public:
  // Binds `address:port` (0 picks a free port) and starts serving.
  // FailedPrecondition naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, int port,
      std::map<std::string, HttpHandler> handlers);

  // Stops accepting, finishes the requests being answered, joins threads.
  ~HttpServer();

  int port() const { return port_; }

 private:
  HttpServer(int listen_fd, int wake_fd_read, int wake_fd_write, int port,
             std::map<std::string, HttpHandler> handlers);

  void AcceptLoop();
  void WorkerLoop();
  void Serve(int fd) const;
  HttpResponse Respond(const std::string& method,
                       const std::string& path) const;

  const int listen_fd_;
  const int wake_fd_read_;
  const int wake_fd_write_;
  const int port_;
  const std::map<std::string, HttpHandler> handlers_;

  absl::Mutex mutex_;
  std::vector<int> pending_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;

  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_SERVER_H_
