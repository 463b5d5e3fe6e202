#include "server/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/test_util/http_client.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int kClientTimeoutSeconds = 5;

using test_util::Exchange;
using test_util::ReadToEnd;

int Connect(int port) {
  return test_util::ConnectLocal(port, kClientTimeoutSeconds);
}

std::string Get(int port, const std::string& path) {
  return Exchange(port, "GET " + path + " HTTP/1.0\r\n\r\n");
}

std::string ReadTestFile(const std::string& name) {
  std::ifstream file("server/http/testdata/tls/" + name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A server on a free port of 127.0.0.1 with one path, /hello, whose handler
// counts its calls and keeps the last request it saw.
class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(const HttpServerOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1", 0, options,
                          {{"/hello", [this](const HttpRequest& request) {
                              ++calls_;
                              absl::MutexLock lock(&mutex_);
                              last_request_ = request;
                              return HttpResponse{200, "text/plain", "hi\n"};
                            }}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    port_ = server_->port();
  }

  HttpRequest LastRequest() {
    absl::MutexLock lock(&mutex_);
    return last_request_;
  }

  std::atomic<int> calls_{0};
  absl::Mutex mutex_;
  HttpRequest last_request_ ABSL_GUARDED_BY(mutex_);
  // Last: stopped before the handler's state goes.
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, AnswersARegisteredPath) {
  StartServer();
  const std::string response = Get(port_, "/hello");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nhi\n"));
  EXPECT_EQ(calls_, 1);
}

TEST_F(HttpServerTest, HeadAnswersWithoutTheBody) {
  StartServer();
  const std::string response = Exchange(port_, "HEAD /hello HTTP/1.0\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(response, HasSubstr("Content-Length: 3"));
  EXPECT_THAT(response, Not(HasSubstr("hi\n")));
}

TEST_F(HttpServerTest, UnknownPathIs404) {
  StartServer();
  EXPECT_THAT(Get(port_, "/nope"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Exchange(port_, "POST /nope HTTP/1.0\r\n\r\n"),
              StartsWith("HTTP/1.1 404"));
  EXPECT_EQ(calls_, 0);
}

TEST_F(HttpServerTest, MethodsOtherThanGetAndHeadAre405) {
  StartServer();
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    const std::string response =
        Exchange(port_, std::string(method) + " /hello HTTP/1.0\r\n\r\n");
    EXPECT_THAT(response, StartsWith("HTTP/1.1 405")) << method;
    EXPECT_THAT(response, HasSubstr("Allow: GET, HEAD")) << method;
  }
  EXPECT_EQ(calls_, 0);
}

TEST_F(HttpServerTest, RequestBodiesAreRefusedUnread) {
  StartServer();
  EXPECT_THAT(Exchange(port_,
                       "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 5"
                       "\r\n\r\nhello"),
              StartsWith("HTTP/1.1 413"));
  // A chunked body that never ends: answered and closed, not waited for.
  EXPECT_THAT(Exchange(port_,
                       "GET /hello HTTP/1.1\r\nHost: x\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n100000\r\nabc"),
              StartsWith("HTTP/1.1 413"));
  EXPECT_EQ(calls_, 0);
  EXPECT_THAT(Get(port_, "/hello"), StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, OversizedRequestHeadIsRefused) {
  HttpServerOptions options;
  options.limits.connection_memory_bytes = 8 * 1024;
  StartServer(options);
  const std::string response =
      Exchange(port_, "GET /hello HTTP/1.0\r\nX-Padding: " +
                          std::string(16 * 1024, 'a') + "\r\n\r\n");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 431"));
  EXPECT_EQ(calls_, 0);
  EXPECT_THAT(Get(port_, "/hello"), StartsWith("HTTP/1.1 200"));
}

TEST_F(HttpServerTest, HandlerSeesMethodPathAndLowerCasedHeaders) {
  StartServer();
  const std::string response =
      Exchange(port_,
               "GET /hello?verbose=1 HTTP/1.1\r\nHost: localhost\r\n"
               "Authorization: Bearer secret-token\r\nX-Tag: a\r\nx-tag: b\r\n"
               "Connection: close\r\n\r\n");
  ASSERT_THAT(response, StartsWith("HTTP/1.1 200"));
  HttpRequest request = LastRequest();
  EXPECT_EQ(request.method, "GET");
  EXPECT_EQ(request.path, "/hello");
  EXPECT_EQ(request.headers["authorization"], "Bearer secret-token");
  EXPECT_EQ(request.headers["host"], "localhost");
  EXPECT_EQ(request.headers["x-tag"], "a, b");
  EXPECT_EQ(request.headers.count("Authorization"), 0u);
}

TEST_F(HttpServerTest, IdleAndSlowConnectionsDoNotDelayRequests) {
  StartServer();
  // More idle connections than the server has threads, and one that sends
  // its request head a byte at a time and never finishes it.
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(Connect(port_));
  const int slow = Connect(port_);
  ASSERT_EQ(write(slow, "G", 1), 1);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THAT(Get(port_, "/hello"), StartsWith("HTTP/1.1 200"));
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(1));
  }
  for (int fd : idle) close(fd);
  close(slow);
}

TEST_F(HttpServerTest, IdleConnectionIsClosedAfterTheTimeout) {
  HttpServerOptions options;
  options.limits.connection_timeout_seconds = 1;
  StartServer(options);
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadToEnd(fd), "");
  const auto waited = std::chrono::steady_clock::now() - start;
  // Closed by the server (EOF), not by the client's 5 s read timeout.
  EXPECT_LT(waited, std::chrono::seconds(kClientTimeoutSeconds - 1));
  close(fd);
}

TEST_F(HttpServerTest, TrickledRequestHeadIsCutAtTheRequestTimeout) {
  HttpServerOptions options;
  options.limits.connection_timeout_seconds = 10;
  options.limits.request_timeout_seconds = 1;
  StartServer(options);
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const timeval poll_interval{0, 200 * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &poll_interval, sizeof poll_interval);
  // A byte every 200 ms: never idle, never done.
  const std::string head =
      "GET /hello HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (size_t i = 0; i < head.size() && !closed; ++i) {
    if (send(fd, &head[i], 1, MSG_NOSIGNAL) != 1) break;
    char buffer[64];
    closed = read(fd, buffer, sizeof buffer) == 0;
  }
  const auto lasted = std::chrono::steady_clock::now() - start;
  EXPECT_GE(lasted, std::chrono::milliseconds(900));
  EXPECT_LT(lasted, std::chrono::seconds(3));
  EXPECT_EQ(calls_, 0);
  close(fd);
}

TEST_F(HttpServerTest, EachRequestOnAKeptAliveConnectionGetsTheFullTimeout) {
  HttpServerOptions options;
  options.limits.request_timeout_seconds = 1;
  StartServer(options);
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const std::string request = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  // Four requests over 1.6 s on one connection: each within 1 s of the
  // previous answer.
  for (int i = 0; i < 4; ++i) {
    absl::SleepFor(absl::Milliseconds(400));
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()))
        << "request " << i;
    char buffer[256];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    ASSERT_GT(n, 0) << "request " << i;
    EXPECT_THAT(std::string(buffer, n), StartsWith("HTTP/1.1 200"));
  }
  close(fd);
}

TEST_F(HttpServerTest, ConnectionsPastThePerAddressLimitAreClosed) {
  HttpServerOptions options;
  options.limits.max_connections_per_ip = 2;
  StartServer(options);
  const int first = Connect(port_);
  const int second = Connect(port_);
  // Accepted and counted by the server before the third comes.
  absl::SleepFor(absl::Milliseconds(200));
  const int third = Connect(port_);
  char buffer[64];
  const auto start = std::chrono::steady_clock::now();
  EXPECT_LE(read(third, buffer, sizeof buffer), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::seconds(kClientTimeoutSeconds - 1));
  // The first two are held: a request on one is answered.
  const std::string request = "GET /hello HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(first, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  EXPECT_THAT(ReadToEnd(first), StartsWith("HTTP/1.1 200"));
  close(first);
  close(second);
  close(third);
}

TEST(HttpServerTlsTest, StartsWithAMatchingCertificateAndKey) {
  HttpServerOptions options;
  options.tls = HttpTlsCredentials{ReadTestFile("server_cert.pem"),
                                   ReadTestFile("server_key.pem"), ""};
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, options, {});
  ASSERT_TRUE(server.ok()) << server.status();
  // A plaintext request is no TLS handshake: no HTTP answer, and the server
  // is not stopped by it.
  EXPECT_THAT(Get((*server)->port(), "/"), Not(StartsWith("HTTP/")));
}

TEST(HttpServerTlsTest, KeyOfAnotherCertificateIsAPreciseError) {
  HttpServerOptions options;
  options.tls = HttpTlsCredentials{ReadTestFile("server_cert.pem"),
                                   ReadTestFile("other_key.pem"), ""};
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, options, {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("cannot serve HTTPS"));
  EXPECT_THAT(server.status().message(), HasSubstr("do not match"));
}

TEST(HttpServerTlsTest, UnreadableClientCaIsAPreciseError) {
  HttpServerOptions options;
  options.tls = HttpTlsCredentials{
      ReadTestFile("server_cert.pem"), ReadTestFile("server_key.pem"),
      "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"};
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, options, {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("trust certificate"));
}

TEST(HttpServerStartTest, NoHandlersAnswer404) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, {}, {});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(Get((*server)->port(), "/metrics"), StartsWith("HTTP/1.1 404"));
}

TEST(HttpServerStartTest, PortInUseNamesTheAddress) {
  absl::StatusOr<std::unique_ptr<HttpServer>> first =
      HttpServer::Start("127.0.0.1", 0, {}, {});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start("127.0.0.1", (*first)->port(), {}, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr("127.0.0.1:" + std::to_string((*first)->port())));
}

// An HttpService that keeps each request and its reply for the test to
// answer from its own thread.
class ParkingService : public HttpService {
 public:
  std::optional<HttpResponse> Screen(const HttpRequest& head) override {
    if (head.path != "/echo") return HttpResponse{404, "text/plain", "", {}};
    return std::nullopt;
  }
  void Handle(HttpRequest request, HttpReply reply,
              HttpClientGone client_gone) override {
    absl::MutexLock lock(&mutex_);
    body_ = request.body;
    reply_ = std::move(reply);
    client_gone_ = std::move(client_gone);
  }
  // Waits for a parked request; answers it with its body.
  bool AnswerWithBody(int status_code) {
    absl::MutexLock lock(&mutex_);
    if (!mutex_.AwaitWithTimeout(
            absl::Condition(
                +[](HttpReply* reply) { return *reply != nullptr; }, &reply_),
            absl::Seconds(5))) {
      return false;
    }
    HttpReply reply = std::move(reply_);
    reply_ = nullptr;
    reply({status_code, "text/plain", body_, {{"X-Echo", "1"}}});
    return true;
  }
  bool ClientGone() {
    absl::MutexLock lock(&mutex_);
    return client_gone_ != nullptr && client_gone_();
  }
  // Waits for a parked request; answers it with `stream`, "begin\n" first.
  bool AnswerWithStream(std::shared_ptr<HttpBodyStream> stream) {
    absl::MutexLock lock(&mutex_);
    if (!mutex_.AwaitWithTimeout(
            absl::Condition(
                +[](HttpReply* reply) { return *reply != nullptr; }, &reply_),
            absl::Seconds(5))) {
      return false;
    }
    HttpReply reply = std::move(reply_);
    reply_ = nullptr;
    reply({200, "text/event-stream", "begin\n", {}, std::move(stream)});
    return true;
  }

 private:
  absl::Mutex mutex_;
  std::string body_ ABSL_GUARDED_BY(mutex_);
  HttpReply reply_ ABSL_GUARDED_BY(mutex_);
  HttpClientGone client_gone_ ABSL_GUARDED_BY(mutex_);
};

class HttpServerServiceTest : public ::testing::Test {
 protected:
  void StartServer(int64_t max_body_bytes) {
    HttpServerOptions options;
    options.limits.max_body_bytes = max_body_bytes;
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1", 0, options, &service_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  ParkingService service_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerServiceTest, BodiesReachTheServiceAndAnswersComeLater) {
  StartServer(1024);
  const int fd = Connect(server_->port());
  const std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  EXPECT_FALSE(service_.ClientGone());
  ASSERT_TRUE(service_.AnswerWithBody(201));
  char buffer[1024];
  const ssize_t n = read(fd, buffer, sizeof buffer);
  ASSERT_GT(n, 0);
  const std::string response(buffer, n);
  EXPECT_THAT(response, StartsWith("HTTP/1.1 201"));
  EXPECT_THAT(response, HasSubstr("X-Echo: 1"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nhello"));
  // Kept alive: a chunked body on the same connection.
  const std::string chunked =
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  ASSERT_EQ(write(fd, chunked.data(), chunked.size()),
            static_cast<ssize_t>(chunked.size()));
  ASSERT_TRUE(service_.AnswerWithBody(200));
  EXPECT_THAT(ReadToEnd(fd), HasSubstr("\r\n\r\nabcde"));
  close(fd);
}

TEST_F(HttpServerServiceTest, ClientGoneOnceTheClientCloses) {
  StartServer(1024);
  const int fd = Connect(server_->port());
  const std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  // Parked once Handle has run.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(service_.ClientGone());
  close(fd);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(service_.ClientGone());
  ASSERT_TRUE(service_.AnswerWithBody(200));
}

// Reads from `fd` until `text` has come (or a read fails); what came.
std::string ReadUntil(int fd, const std::string& text) {
  std::string got;
  char buffer[1024];
  while (got.find(text) == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, n);
  }
  return got;
}

TEST_F(HttpServerServiceTest, StreamedAnswerArrivesPieceByPiece) {
  StartServer(1024);
  const int fd = Connect(server_->port());
  const std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\nhi";
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  auto stream = std::make_shared<HttpBodyStream>(1024);
  ASSERT_TRUE(service_.AnswerWithStream(stream));
  const std::string head = ReadUntil(fd, "begin\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/event-stream"));
  EXPECT_THAT(head, HasSubstr("Transfer-Encoding: chunked"));
  // Each piece reaches the client before the next is written.
  ASSERT_TRUE(stream->Write("first piece\n"));
  EXPECT_THAT(ReadUntil(fd, "first piece\n"), HasSubstr("first piece\n"));
  EXPECT_FALSE(service_.ClientGone());
  ASSERT_TRUE(stream->Write("second\n"));
  stream->Close();
  const std::string rest = ReadToEnd(fd);
  EXPECT_THAT(rest, HasSubstr("second\n"));
  EXPECT_THAT(rest, HasSubstr("\r\n0\r\n\r\n")) << "the last chunk";
  EXPECT_TRUE(service_.ClientGone());
  close(fd);
}

TEST_F(HttpServerServiceTest, StreamSeesTheClientGoAndTheServerStops) {
  StartServer(1024);
  const int fd = Connect(server_->port());
  const std::string request =
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
  ASSERT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  auto stream = std::make_shared<HttpBodyStream>(1024);
  ASSERT_TRUE(service_.AnswerWithStream(stream));
  ReadUntil(fd, "begin\n");
  absl::SleepFor(absl::Milliseconds(100));  // Parked: nothing to send.
  EXPECT_FALSE(service_.ClientGone());
  close(fd);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(service_.ClientGone());
  EXPECT_TRUE(stream->ClientGone());
  // The producer ends its stream; the server then stops without waiting.
  stream->Close();
  server_->WaitUntilIdle();
  server_.reset();
}

TEST_F(HttpServerServiceTest, BodiesPastTheLimitAreRefused) {
  StartServer(8);
  EXPECT_THAT(Exchange(server_->port(),
                       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 9"
                       "\r\n\r\n123456789"),
              StartsWith("HTTP/1.1 413"));
  // A chunked body cannot be answered while it is read: past the limit the
  // connection is closed.
  EXPECT_EQ(Exchange(server_->port(),
                     "POST /echo HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n"),
            "");
  EXPECT_THAT(Exchange(server_->port(),
                       "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 9"
                       "\r\n\r\n123456789"),
              StartsWith("HTTP/1.1 404"));
}

TEST_F(HttpServerServiceTest, StopIntakeAnswers503) {
  StartServer(8);
  server_->StopIntake();
  EXPECT_THAT(Exchange(server_->port(),
                       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2"
                       "\r\n\r\nhi"),
              StartsWith("HTTP/1.1 503"));
}

}  // namespace
}  // namespace castserve
