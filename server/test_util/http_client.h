// A bare HTTP/1.x client over a TCP socket, for the tests of the HTTP ports
// (metrics, REST): they send exactly the bytes they mean, malformed or
// half-sent requests included, which a real client library would not.
#ifndef CASTSERVE_SERVER_TEST_UTIL_HTTP_CLIENT_H_
#define CASTSERVE_SERVER_TEST_UTIL_HTTP_CLIENT_H_

#include <string>

namespace castserve::test_util {

// A TCP socket connected to 127.0.0.1:port whose reads give up after
// `read_timeout_seconds`; -1 when the connection fails. The caller closes it.
int ConnectLocal(int port, int read_timeout_seconds = 5);

// Everything the server sends on `fd` until it closes the connection (or a
// read times out).
std::string ReadToEnd(int fd);

// Sends `request` on a new connection and returns the whole response ("" when
// the connection fails). The request should say HTTP/1.0 or
// `Connection: close`, so that the server closes.
std::string Exchange(int port, const std::string& request,
                     int read_timeout_seconds = 5);

}  // namespace castserve::test_util

#endif  // CASTSERVE_SERVER_TEST_UTIL_HTTP_CLIENT_H_
