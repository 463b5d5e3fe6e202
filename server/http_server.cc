#include "server/http_server.h"

#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/port_check.h"
#include "server/socket_deadlines.h"

namespace castserve {
namespace {

constexpr int kListenBacklog = 128;
// How often request deadlines are checked: they are whole seconds.
constexpr absl::Duration kDeadlineCheckInterval = absl::Milliseconds(250);

HttpResponse TextResponse(int status_code, std::string body) {
  return {status_code, "text/plain; charset=utf-8", std::move(body)};
}

// A listening, non-blocking socket on `address:port`: libmicrohttpd's
// polling threads share it, and each accept must return at once when
// another thread took the connection.
absl::StatusOr<int> Listen(const std::string& address, int port) {
  absl::StatusOr<int> fd = BindTcpSocket(address, port);
  if (!fd.ok()) return fd.status();
  if (listen(*fd, kListenBacklog) != 0 ||
      fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK) != 0) {
    const int error = errno;
    close(*fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", address, ":", port, ": ", std::strerror(error)));
  }
  return *fd;
}

MHD_Result AddHeader(void* cls, MHD_ValueKind /*kind*/, const char* name,
                     const char* value) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
  const char* text = value == nullptr ? "" : value;
  auto [it, inserted] = headers->try_emplace(absl::AsciiStrToLower(name), text);
  if (!inserted) absl::StrAppend(&it->second, ", ", text);
  return MHD_YES;
}

// Whether the request announces a body. A response queued before the body is
// read makes libmicrohttpd skip the body and close the connection.
bool HasBody(MHD_Connection* connection) {
  const char* length = MHD_lookup_connection_value(
      connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  return (length != nullptr && std::strcmp(length, "0") != 0) ||
         MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
             nullptr;
}

// Whether the TLS peer sent a certificate that verifies against the trusted
// client CAs (libmicrohttpd asks for one but leaves the check to us).
bool HasTrustedClientCertificate(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == nullptr || info->tls_session == nullptr) return false;
  unsigned int verify_status = 0;
  return gnutls_certificate_verify_peers2(
             static_cast<gnutls_session_t>(info->tls_session),
             &verify_status) == GNUTLS_E_SUCCESS &&
         verify_status == 0;
}

int ConnectionFd(MHD_Connection* connection) {
  return MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)
      ->connect_fd;
}

MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response) {
  MHD_Response* reply = MHD_create_response_from_buffer(
      response.body.size(), const_cast<char*>(response.body.data()),
      MHD_RESPMEM_MUST_COPY);
  if (reply == nullptr) return MHD_NO;
  MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE,
                          response.content_type.c_str());
  if (response.status_code == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(reply, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result queued =
      MHD_queue_response(connection, response.status_code, reply);
  MHD_destroy_response(reply);
  return queued;
}

}  // namespace

struct HttpServer::Impl {
  Impl(std::map<std::string, HttpHandler> handlers,
       std::optional<HttpTlsCredentials> tls, absl::Duration request_timeout)
      : handlers(std::move(handlers)),
        tls(std::move(tls)),
        request_timeout(request_timeout),
        deadlines(kDeadlineCheckInterval) {}

  // Stops libmicrohttpd (joining its threads) while the handlers still live.
  ~Impl() {
    if (daemon != nullptr) MHD_stop_daemon(daemon);
  }

  // The answer to a request that no handler sees, if it is one.
  std::optional<HttpResponse> Refusal(MHD_Connection* connection,
                                      const char* path,
                                      absl::string_view method) const {
    if (tls.has_value() && !tls->client_ca_pem.empty() &&
        !HasTrustedClientCertificate(connection)) {
      return TextResponse(MHD_HTTP_FORBIDDEN,
                          "a trusted client certificate is required\n");
    }
    if (handlers.find(path) == handlers.end()) {
      return TextResponse(MHD_HTTP_NOT_FOUND, "not found\n");
    }
    if (method != "GET" && method != "HEAD") {
      return TextResponse(MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    if (HasBody(connection)) {
      return TextResponse(MHD_HTTP_PAYLOAD_TOO_LARGE,
                          "request bodies are not accepted\n");
    }
    return std::nullopt;
  }

  // The handler's answer to a request Refusal let through.
  HttpResponse Answer(MHD_Connection* connection, const char* path,
                      const char* method) const {
    HttpRequest request{method, path, {}};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, &AddHeader,
                              &request.headers);
    return handlers.at(request.path)(request);
  }

  // libmicrohttpd's messages: collected while starting (they explain a
  // failed start), logged at debug level afterwards (a client that breaks
  // off a TLS handshake, say; clients decide how many there are).
  static void ReportMessage(void* cls, const char* format, va_list args) {
    char text[512];
    std::vsnprintf(text, sizeof text, format, args);
    const absl::string_view message = absl::StripTrailingAsciiWhitespace(text);
    auto* impl = static_cast<Impl*>(cls);
    absl::MutexLock lock(&impl->mutex);
    if (impl->starting) {
      impl->start_messages.emplace_back(message);
    } else {
      Log(LogLevel::kDebug, "http server", {{"message", message}});
    }
  }

  // Called twice per request. First once its head is in: a refusal is
  // queued at once, which makes libmicrohttpd close the connection after it
  // and leave any body unread. A request to answer is marked and answered on
  // the second call, once the (empty) request is complete, so that the
  // connection stays open for the next request.
  static MHD_Result AnswerRequest(void* cls, MHD_Connection* connection,
                                  const char* path, const char* method,
                                  const char* /*version*/,
                                  const char* /*upload_data*/,
                                  size_t* upload_data_size,
                                  void** request_context) {
    if (*upload_data_size != 0) return MHD_NO;  // A body after the refusal.
    auto* impl = static_cast<Impl*>(cls);
    if (*request_context == nullptr) {
      std::optional<HttpResponse> refusal =
          impl->Refusal(connection, path, method);
      if (refusal.has_value()) return Queue(connection, *refusal);
      *request_context = impl;  // Any non-null mark.
      return MHD_YES;
    }
    return Queue(connection, impl->Answer(connection, path, method));
  }

  // A connection's first request is due within the request timeout of its
  // start; its deadline goes before libmicrohttpd closes the socket.
  static void TrackConnection(void* cls, MHD_Connection* connection,
                              void** /*socket_context*/,
                              MHD_ConnectionNotificationCode code) {
    auto* impl = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      impl->deadlines.Set(ConnectionFd(connection),
                          absl::Now() + impl->request_timeout);
    } else {
      impl->deadlines.Forget(ConnectionFd(connection));
    }
  }

  // The next request on a kept-alive connection is due within the request
  // timeout of this one's end.
  static void RequestCompleted(void* cls, MHD_Connection* connection,
                               void** /*request_context*/,
                               MHD_RequestTerminationCode /*code*/) {
    auto* impl = static_cast<Impl*>(cls);
    impl->deadlines.Set(ConnectionFd(connection),
                        absl::Now() + impl->request_timeout);
  }

  // The reasons libmicrohttpd gave for a failed start.
  std::string StartFailure() {
    absl::MutexLock lock(&mutex);
    return start_messages.empty() ? "libmicrohttpd gave no reason"
                                  : absl::StrJoin(start_messages, "; ");
  }

  void Started() {
    absl::MutexLock lock(&mutex);
    starting = false;
  }

  const std::map<std::string, HttpHandler> handlers;
  // Kept while the server runs: libmicrohttpd holds pointers into it.
  const std::optional<HttpTlsCredentials> tls;
  const absl::Duration request_timeout;
  // Outlives the daemon: connections closed as it stops forget theirs.
  SocketDeadlines deadlines;
  int port = 0;
  MHD_Daemon* daemon = nullptr;

  absl::Mutex mutex;
  bool starting ABSL_GUARDED_BY(mutex) = true;
  std::vector<std::string> start_messages ABSL_GUARDED_BY(mutex);
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, int port, const HttpServerOptions& options,
    std::map<std::string, HttpHandler> handlers) {
  absl::StatusOr<int> listen_fd = Listen(address, port);
  if (!listen_fd.ok()) return listen_fd.status();
  absl::StatusOr<int> bound_port = BoundPort(*listen_fd);
  if (!bound_port.ok()) {
    close(*listen_fd);
    return bound_port.status();
  }
  auto impl = std::make_unique<Impl>(
      std::move(handlers), options.tls,
      absl::Seconds(options.limits.request_timeout_seconds));
  impl->port = *bound_port;

  const HttpServerLimits& limits = options.limits;
  // From here on libmicrohttpd owns the socket: it closes it when it stops,
  // and on the failures to start that can happen here (TLS setup).
  std::vector<MHD_OptionItem> items = {
      // First, so that it hears about problems with the options below.
      {MHD_OPTION_EXTERNAL_LOGGER,
       reinterpret_cast<intptr_t>(&Impl::ReportMessage), impl.get()},
      {MHD_OPTION_LISTEN_SOCKET, *listen_fd, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, limits.max_connections, nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.max_connections_per_ip,
       nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, limits.connection_timeout_seconds,
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, limits.connection_memory_bytes,
       nullptr},
      {MHD_OPTION_NOTIFY_CONNECTION,
       reinterpret_cast<intptr_t>(&Impl::TrackConnection), impl.get()},
      {MHD_OPTION_NOTIFY_COMPLETED,
       reinterpret_cast<intptr_t>(&Impl::RequestCompleted), impl.get()},
  };
  // A pool of one is no pool: libmicrohttpd then polls in one thread.
  if (limits.threads > 1) {
    items.push_back({MHD_OPTION_THREAD_POOL_SIZE, limits.threads, nullptr});
  }
  unsigned int flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (impl->tls.has_value()) {
    flags |= MHD_USE_TLS;
    items.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0,
                     const_cast<char*>(impl->tls->certificate_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0,
                     const_cast<char*>(impl->tls->private_key_pem.c_str())});
    if (!impl->tls->client_ca_pem.empty()) {
      items.push_back({MHD_OPTION_HTTPS_MEM_TRUST, 0,
                       const_cast<char*>(impl->tls->client_ca_pem.c_str())});
    }
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});

  impl->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::AnswerRequest, impl.get(),
      MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  if (impl->daemon == nullptr) {
    const std::string what =
        absl::StrCat("cannot serve HTTP", impl->tls ? "S" : "", " on ", address,
                     ":", *bound_port, ": ", impl->StartFailure());
    return impl->tls ? absl::InvalidArgumentError(what)
                     : absl::InternalError(what);
  }
  impl->Started();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port; }

}  // namespace castserve
