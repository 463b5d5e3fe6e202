#ifndef CASTSERVE_SERVER_HTTP_HTTP_SERVER_OPTIONS_H_
#define CASTSERVE_SERVER_HTTP_HTTP_SERVER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace castserve {

// What one HttpServer lets its clients hold. Idle and slow connections only
// hold a connection slot and up to `connection_memory_bytes`, never a thread,
// so these bound what many clients can take; none of them can delay another
// client's request.
struct HttpServerLimits {
  // Connections open at once. Past it, new connections wait in the listen
  // backlog (or are closed when accepted) until one closes.
  int max_connections = 256;
  // Connections open at once from one client address; a connection past it
  // is closed as soon as it is accepted. 0: no per-address limit.
  int max_connections_per_ip = 32;
  // A connection that has sent and received nothing for this long is closed,
  // whatever state its request is in.
  int connection_timeout_seconds = 10;
  // Each request must be received within this many seconds of the
  // connection opening (or of the previous answer on it), and an answer
  // given later (HttpService::Handle) must be sent within this many seconds
  // of being given, or the connection is closed: a client that trickles its
  // request a byte at a time is never idle, so the inactivity timeout alone
  // would let it keep its slot for hours. The time the work behind an
  // answer takes is not counted: its own deadline bounds it.
  int request_timeout_seconds = 30;
  // Largest request body, in bytes; a larger one gets 413 (at once when its
  // Content-Length says so; a chunked body is cut off and the connection
  // closed). 0: requests with a body get 413.
  int64_t max_body_bytes = 0;
  // Memory each connection may use for its request head (request line and
  // headers) and the response's head. A larger request head gets 431 (414
  // for a long request line).
  int64_t connection_memory_bytes = 16 * 1024;
  // Threads that poll the connections (epoll) and run the handlers.
  int threads = 2;
};

// PEM text (not file names) for HTTPS.
struct HttpTlsCredentials {
  // The server's certificate, optionally followed by its chain.
  std::string certificate_pem;
  std::string private_key_pem;
  // Empty: clients are not asked for a certificate. Otherwise every request
  // must come with a client certificate that verifies against one of these
  // CA certificates, or it gets 403.
  std::string client_ca_pem;
};

struct HttpServerOptions {
  HttpServerLimits limits;
  // Set: the port speaks HTTPS only.
  std::optional<HttpTlsCredentials> tls;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_HTTP_SERVER_OPTIONS_H_
