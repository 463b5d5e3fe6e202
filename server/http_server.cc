#include "server/http_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/port_check.h"

namespace castserve {
namespace {

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr int kRequestTimeoutSeconds = 5;
constexpr int kWorkerThreads = 2;

const char* ReasonPhrase(int status_code) {
  switch (status_code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

absl::StatusOr<int> Listen(const std::string& address, int port) {
  absl::StatusOr<int> fd = BindTcpSocket(address, port);
  if (!fd.ok()) return fd.status();
  if (listen(*fd, 64) != 0) {
    const int error = errno;
    close(*fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", address, ":", port, ": ", std::strerror(error)));
  }
  return *fd;
}

// Reads until the end of the request head. Empty on timeout, error or excess.
std::string ReadRequestHead(int fd) {
  std::string head;
  char buffer[2048];
  while (head.find("\r\n\r\n") == std::string::npos &&
         head.find("\n\n") == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0 || head.size() + n > kMaxRequestBytes) return "";
    head.append(buffer, n);
  }
  return head;
}

void WriteAll(int fd, const std::string& data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n =
        send(fd, data.data() + written, data.size() - written, MSG_NOSIGNAL);
    if (n <= 0) return;
    written += n;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, int port,
    std::map<std::string, HttpHandler> handlers) {
  absl::StatusOr<int> listen_fd = Listen(address, port);
  if (!listen_fd.ok()) return listen_fd.status();
  absl::StatusOr<int> bound_port = BoundPort(*listen_fd);
  int wake[2];
  if (!bound_port.ok() || pipe2(wake, O_CLOEXEC) != 0) {
    close(*listen_fd);
    return bound_port.ok() ? absl::InternalError("pipe2() failed")
                           : bound_port.status();
  }
  return std::unique_ptr<HttpServer>(new HttpServer(
      *listen_fd, wake[0], wake[1], *bound_port, std::move(handlers)));
}

HttpServer::HttpServer(int listen_fd, int wake_fd_read, int wake_fd_write,
                       int port, std::map<std::string, HttpHandler> handlers)
    : listen_fd_(listen_fd),
      wake_fd_read_(wake_fd_read),
      wake_fd_write_(wake_fd_write),
      port_(port),
      handlers_(std::move(handlers)) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
  for (int i = 0; i < kWorkerThreads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

HttpServer::~HttpServer() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  (void)!write(wake_fd_write_, "x", 1);
  acceptor_.join();
  for (std::thread& worker : workers_) worker.join();
  for (int fd : pending_) close(fd);
  close(listen_fd_);
  close(wake_fd_read_);
  close(wake_fd_write_);
}

void HttpServer::AcceptLoop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_read_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const timeval timeout{kRequestTimeoutSeconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    absl::MutexLock lock(&mutex_);
    pending_.push_back(fd);
  }
}

void HttpServer::WorkerLoop() {
  while (true) {
    int fd = -1;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](HttpServer* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mutex_) {
            return self->stopping_ || !self->pending_.empty();
          },
          this));
      if (stopping_) return;
      fd = pending_.front();
      pending_.erase(pending_.begin());
    }
    Serve(fd);
    close(fd);
  }
}

void HttpServer::Serve(int fd) const {
  const std::string head = ReadRequestHead(fd);
  HttpResponse response;
  std::string method;
  const std::string request_line = head.substr(0, head.find_first_of("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || parts[2].rfind("HTTP/", 0) != 0) {
    response = {400, "text/plain; charset=utf-8", "malformed request\n"};
  } else {
    method = parts[0];
    const std::string path = parts[1].substr(0, parts[1].find('?'));
    response = Respond(method, path);
  }
  std::string out = absl::StrCat("HTTP/1.1 ", response.status_code, " ",
                                 ReasonPhrase(response.status_code),
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (method != "HEAD") out += response.body;
  WriteAll(fd, out);
}

HttpResponse HttpServer::Respond(const std::string& method,
                                 const std::string& path) const {
  auto it = handlers_.find(path);
  if (it == handlers_.end()) {
    return {404, "text/plain; charset=utf-8", "not found\n"};
  }
  if (method != "GET" && method != "HEAD") {
    return {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
  }
  return it->second();
}

}  // namespace castserve
