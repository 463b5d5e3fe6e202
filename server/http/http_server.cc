#include "server/http/http_server.h"

#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/http/port_check.h"
#include "server/http/socket_deadlines.h"
#include "server/log.h"

namespace castserve {
namespace {

constexpr int kListenBacklog = 128;
// How often request deadlines are checked: they are whole seconds.
constexpr absl::Duration kDeadlineCheckInterval = absl::Milliseconds(250);
// The most a streamed answer hands libmicrohttpd at once.
constexpr size_t kStreamBlockBytes = 16 * 1024;

HttpResponse TextResponse(int status_code, std::string body) {
  return {status_code, "text/plain; charset=utf-8", std::move(body), {}};
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

// Why the body the request announces cannot be taken (413), if so. A
// response queued before the body is read makes libmicrohttpd skip the body
// and close the connection.
std::optional<HttpResponse> BodyRefusal(MHD_Connection* connection,
                                        int64_t max_body_bytes) {
  const char* length = MHD_lookup_connection_value(
      connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const bool chunked =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                  MHD_HTTP_HEADER_TRANSFER_ENCODING) != nullptr;
  uint64_t bytes = 0;
  if (length != nullptr && !absl::SimpleAtoi(length, &bytes)) {
    return TextResponse(MHD_HTTP_BAD_REQUEST, "malformed Content-Length\n");
  }
  if (max_body_bytes == 0 && (bytes > 0 || chunked)) {
    return TextResponse(MHD_HTTP_CONTENT_TOO_LARGE,
                        "request bodies are not accepted\n");
  }
  if (bytes > static_cast<uint64_t>(max_body_bytes)) {
    return TextResponse(MHD_HTTP_CONTENT_TOO_LARGE,
                        absl::StrCat("the request body is ", bytes,
                                     " bytes, above the limit of ",
                                     max_body_bytes, " bytes\n"));
  }
  return std::nullopt;
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

// True when the peer closed its end of `fd` or the socket failed; `fd`
// must be open (its connection parked or in a callback).
bool PeerClosed(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 ||
         (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

MHD_Result QueueReply(MHD_Connection* connection, const HttpResponse& response,
                      MHD_Response* reply) {
  if (reply == nullptr) return MHD_NO;
  MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE,
                          response.content_type.c_str());
  for (const auto& [name, value] : response.headers) {
    MHD_add_response_header(reply, name.c_str(), value.c_str());
  }
  const MHD_Result queued =
      MHD_queue_response(connection, response.status_code, reply);
  MHD_destroy_response(reply);
  return queued;
}

MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response) {
  return QueueReply(
      connection, response,
      MHD_create_response_from_buffer(response.body.size(),
                                      const_cast<char*>(response.body.data()),
                                      MHD_RESPMEM_MUST_COPY));
}

// A streamed answer on its way: libmicrohttpd's content reader reads it
// from the stream; its end (sent, or the connection closed) detaches the
// stream and tells the server the answer is no longer due.
struct StreamSending {
  std::shared_ptr<HttpBodyStream> stream;
  // What the response's own `body` still has to send first.
  std::string head_body;
  size_t head_sent = 0;
  std::function<void()> progress;
  std::function<void()> finished;

  static ssize_t Read(void* cls, uint64_t /*pos*/, char* out, size_t max) {
    auto* sending = static_cast<StreamSending*>(cls);
    ssize_t n = 0;
    if (sending->head_sent < sending->head_body.size()) {
      n = static_cast<ssize_t>(
          std::min(max, sending->head_body.size() - sending->head_sent));
      std::memcpy(out, sending->head_body.data() + sending->head_sent, n);
      sending->head_sent += n;
    } else {
      n = sending->stream->Read(out, max);
    }
    if (n > 0) sending->progress();
    if (n == HttpBodyStream::kEndOfStream) {
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    return n == HttpBodyStream::kCutOff ? MHD_CONTENT_READER_END_WITH_ERROR : n;
  }

  static void Free(void* cls) {
    auto* sending = static_cast<StreamSending*>(cls);
    sending->stream->Detach();
    sending->finished();
    delete sending;
  }
};

// The fixed-path server of HttpServer::Start's second form.
class FixedPathService : public HttpService {
 public:
  explicit FixedPathService(std::map<std::string, HttpHandler> handlers)
      : handlers_(std::move(handlers)) {}

  std::optional<HttpResponse> Screen(const HttpRequest& head) override {
    if (handlers_.find(head.path) == handlers_.end()) {
      return TextResponse(MHD_HTTP_NOT_FOUND, "not found\n");
    }
    if (head.method != "GET" && head.method != "HEAD") {
      HttpResponse refusal =
          TextResponse(MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
      refusal.headers.emplace_back(MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
      return refusal;
    }
    return std::nullopt;
  }

  void Handle(HttpRequest request, HttpReply reply,
              HttpClientGone /*client_gone*/) override {
    reply(handlers_.at(request.path)(request));
  }

 private:
  const std::map<std::string, HttpHandler> handlers_;
};

// One request's answer, shared by the polling thread that parks the
// connection and whoever gives the answer.
class PendingAnswer {
 public:
  PendingAnswer(MHD_Connection* connection, int fd, SocketDeadlines* deadlines,
                absl::Duration send_timeout)
      : connection_(connection),
        fd_(fd),
        deadlines_(deadlines),
        send_timeout_(send_timeout) {}

  // The answer, once; a parked connection is resumed, with the send
  // timeout as its deadline. Returns false when the answer had been given
  // already.
  bool Give(HttpResponse response) {
    bool resume = false;
    {
      absl::MutexLock lock(&mutex_);
      if (response_.has_value()) return false;
      response_ = std::move(response);
      resume = parked_;
    }
    // Outside the lock: libmicrohttpd takes locks of its own. The
    // connection stays parked until this call, so it is still open.
    if (resume) {
      deadlines_->SetAfter(fd_, send_timeout_);
      MHD_resume_connection(connection_);
    }
    return true;
  }

  // On the polling thread, once Handle returned: true when the answer is
  // in; otherwise the connection is parked until it comes. Parks under the
  // lock, so that Give resumes only a parked connection.
  bool AnsweredOrPark() {
    absl::MutexLock lock(&mutex_);
    if (response_.has_value()) return true;
    parked_ = true;
    MHD_suspend_connection(connection_);
    return false;
  }

  // The answer; only once Give ran.
  const HttpResponse& response() {
    absl::MutexLock lock(&mutex_);
    return *response_;
  }

  // True once answered, or once the peer closed its end or the socket
  // failed. Until the answer, the connection is in a callback or parked, so
  // libmicrohttpd has not closed the socket.
  bool ClientGone() {
    absl::MutexLock lock(&mutex_);
    if (response_.has_value()) {
      return response_->stream == nullptr || response_->stream->ClientGone();
    }
    return PeerClosed(fd_);
  }

 private:
  MHD_Connection* const connection_;
  const int fd_;
  SocketDeadlines* const deadlines_;
  const absl::Duration send_timeout_;
  absl::Mutex mutex_;
  std::optional<HttpResponse> response_ ABSL_GUARDED_BY(mutex_);
  bool parked_ ABSL_GUARDED_BY(mutex_) = false;
};

// What libmicrohttpd keeps for one request between the calls of
// AnswerRequest.
struct RequestState {
  HttpRequest request;
  // Set once the request went to HttpService::Handle.
  std::shared_ptr<PendingAnswer> answer;
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpService* service, std::unique_ptr<HttpService> owned_service,
       std::optional<HttpTlsCredentials> tls, const HttpServerLimits& limits)
      : owned_service(std::move(owned_service)),
        service(service != nullptr ? service : this->owned_service.get()),
        tls(std::move(tls)),
        request_timeout(absl::Seconds(limits.request_timeout_seconds)),
        max_body_bytes(limits.max_body_bytes),
        deadlines(kDeadlineCheckInterval) {}

  // Stops libmicrohttpd (joining its threads) while the service still
  // lives, once no connection is parked (libmicrohttpd must not be stopped
  // with one).
  ~Impl() {
    WaitUntilIdle();
    if (daemon != nullptr) MHD_stop_daemon(daemon);
  }

  void WaitUntilIdle() {
    absl::MutexLock lock(&mutex);
    mutex.Await(absl::Condition(
        +[](int* due) { return *due == 0; }, &answers_due));
  }

  // The answer to a request that is refused before its body is read, if it
  // is.
  std::optional<HttpResponse> Refusal(MHD_Connection* connection,
                                      const HttpRequest& head) {
    {
      absl::MutexLock lock(&mutex);
      if (stopping) {
        return TextResponse(MHD_HTTP_SERVICE_UNAVAILABLE,
                            "the server is stopping\n");
      }
    }
    if (tls.has_value() && !tls->client_ca_pem.empty() &&
        !HasTrustedClientCertificate(connection)) {
      return TextResponse(MHD_HTTP_FORBIDDEN,
                          "a trusted client certificate is required\n");
    }
    if (std::optional<HttpResponse> refusal = service->Screen(head)) {
      return refusal;
    }
    return BodyRefusal(connection, max_body_bytes);
  }

  // Hands a complete request to the service; queues its answer when it
  // came inline, else parks the connection until it comes.
  MHD_Result Dispatch(MHD_Connection* connection, RequestState* state) {
    const int fd = ConnectionFd(connection);
    state->answer = std::make_shared<PendingAnswer>(connection, fd, &deadlines,
                                                    request_timeout);
    {
      absl::MutexLock lock(&mutex);
      ++answers_due;
    }
    // The work takes what it takes (its own deadline bounds it); sending
    // the answer gets a request timeout of its own (Answered).
    deadlines.Forget(fd);
    std::shared_ptr<PendingAnswer> answer = state->answer;
    service->Handle(
        std::move(state->request),
        [this, answer](HttpResponse response) {
          // A streamed answer stays due until it is sent (QueueAnswer).
          const bool streamed = response.stream != nullptr;
          if (answer->Give(std::move(response)) && !streamed) AnswerGiven();
        },
        [answer] { return answer->ClientGone(); });
    if (!answer->AnsweredOrPark()) return MHD_YES;
    deadlines.SetAfter(fd, request_timeout);
    return QueueAnswer(connection, answer->response());
  }

  // Queues a given answer; a streamed one reads its stream through a
  // StreamSending until the stream ends.
  MHD_Result QueueAnswer(MHD_Connection* connection,
                         const HttpResponse& response) {
    if (response.stream == nullptr) return Queue(connection, response);
    const int fd = ConnectionFd(connection);
    response.stream->Attach({[this, connection, fd] {
                               deadlines.Forget(fd);
                               MHD_suspend_connection(connection);
                             },
                             [this, connection, fd] {
                               deadlines.SetAfter(fd, request_timeout);
                               MHD_resume_connection(connection);
                             },
                             [fd] { return PeerClosed(fd); }});
    auto* sending = new StreamSending{
        response.stream, response.body, 0,
        [this, fd] { deadlines.SetAfter(fd, request_timeout); },
        [this] { AnswerGiven(); }};
    MHD_Response* reply = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, kStreamBlockBytes, &StreamSending::Read, sending,
        &StreamSending::Free);
    if (reply == nullptr) {
      StreamSending::Free(sending);
      return MHD_NO;
    }
    return QueueReply(connection, response, reply);
  }

  void AnswerGiven() {
    absl::MutexLock lock(&mutex);
    --answers_due;
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

  // Called several times per request: once its head is in (a refusal is
  // queued at once, which makes libmicrohttpd close the connection after it
  // and leave any body unread), once per piece of body, once the request
  // is complete (it goes to the service), and once more after a parked
  // connection was resumed (its answer is queued).
  static MHD_Result AnswerRequest(void* cls, MHD_Connection* connection,
                                  const char* path, const char* method,
                                  const char* /*version*/,
                                  const char* upload_data,
                                  size_t* upload_data_size,
                                  void** request_context) {
    auto* impl = static_cast<Impl*>(cls);
    auto* state = static_cast<RequestState*>(*request_context);
    if (state == nullptr) {
      HttpRequest head{method, path, {}, {}};
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &AddHeader,
                                &head.headers);
      if (std::optional<HttpResponse> refusal =
              impl->Refusal(connection, head)) {
        return Queue(connection, *refusal);
      }
      *request_context = new RequestState{std::move(head), nullptr};
      return MHD_YES;
    }
    if (*upload_data_size != 0) {
      // A chunked body past the limit: no answer can be queued while the
      // body is being read, so the connection is closed.
      if (state->answer != nullptr ||
          state->request.body.size() + *upload_data_size >
              static_cast<uint64_t>(impl->max_body_bytes)) {
        return MHD_NO;
      }
      state->request.body.append(upload_data, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (state->answer == nullptr) return impl->Dispatch(connection, state);
    return impl->QueueAnswer(connection, state->answer->response());
  }

  // A connection's first request is due within the request timeout of its
  // start; its deadline goes before libmicrohttpd closes the socket.
  static void TrackConnection(void* cls, MHD_Connection* connection,
                              void** /*socket_context*/,
                              MHD_ConnectionNotificationCode code) {
    auto* impl = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      impl->deadlines.SetAfter(ConnectionFd(connection), impl->request_timeout);
    } else {
      impl->deadlines.Forget(ConnectionFd(connection));
    }
  }

  // The next request on a kept-alive connection is due within the request
  // timeout of this one's end.
  static void RequestCompleted(void* cls, MHD_Connection* connection,
                               void** request_context,
                               MHD_RequestTerminationCode /*code*/) {
    auto* impl = static_cast<Impl*>(cls);
    delete static_cast<RequestState*>(*request_context);
    *request_context = nullptr;
    impl->deadlines.SetAfter(ConnectionFd(connection), impl->request_timeout);
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

  const std::unique_ptr<HttpService> owned_service;
  HttpService* const service;
  // Kept while the server runs: libmicrohttpd holds pointers into it.
  const std::optional<HttpTlsCredentials> tls;
  const absl::Duration request_timeout;
  const int64_t max_body_bytes;
  // Outlives the daemon: connections closed as it stops forget theirs.
  SocketDeadlines deadlines;
  int port = 0;
  MHD_Daemon* daemon = nullptr;

  absl::Mutex mutex;
  bool starting ABSL_GUARDED_BY(mutex) = true;
  bool stopping ABSL_GUARDED_BY(mutex) = false;
  // Requests handed to the service and not answered yet.
  int answers_due ABSL_GUARDED_BY(mutex) = 0;
  std::vector<std::string> start_messages ABSL_GUARDED_BY(mutex);
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, int port, const HttpServerOptions& options,
    std::map<std::string, HttpHandler> handlers) {
  HttpServerOptions fixed = options;
  fixed.limits.max_body_bytes = 0;
  return StartImpl(address, port, fixed, nullptr,
                   std::make_unique<FixedPathService>(std::move(handlers)));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, int port, const HttpServerOptions& options,
    HttpService* service) {
  if (service == nullptr) {  // Start(..., {}) picks this form: no paths.
    return Start(address, port, options, std::map<std::string, HttpHandler>());
  }
  return StartImpl(address, port, options, service, nullptr);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::StartImpl(
    const std::string& address, int port, const HttpServerOptions& options,
    HttpService* service, std::unique_ptr<HttpService> owned_service) {
  absl::StatusOr<int> listen_fd = Listen(address, port);
  if (!listen_fd.ok()) return listen_fd.status();
  absl::StatusOr<int> bound_port = BoundPort(*listen_fd);
  if (!bound_port.ok()) {
    close(*listen_fd);
    return bound_port.status();
  }
  auto impl = std::make_unique<Impl>(service, std::move(owned_service),
                                     options.tls, options.limits);
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
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                       MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
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

void HttpServer::StopIntake() {
  absl::MutexLock lock(&impl_->mutex);
  impl_->stopping = true;
}

void HttpServer::WaitUntilIdle() { impl_->WaitUntilIdle(); }

}  // namespace castserve
