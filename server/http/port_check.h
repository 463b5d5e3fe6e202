#ifndef CASTSERVE_SERVER_HTTP_PORT_CHECK_H_
#define CASTSERVE_SERVER_HTTP_PORT_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace castserve {

// Binds and releases a TCP socket on `address:port` (with SO_REUSEADDR, as
// gRPC binds). FailedPrecondition naming the address and the system's reason
// (for example "Address already in use") when the bind fails; InvalidArgument
// when `address` is not a numeric IPv4/IPv6 address or a resolvable name.
absl::Status CheckPortAvailable(const std::string& address, int port);

// A TCP socket bound (not yet listening) to `address:port`, with
// SO_REUSEADDR and close-on-exec; the caller owns the descriptor. Errors as
// for CheckPortAvailable.
absl::StatusOr<int> BindTcpSocket(const std::string& address, int port);

// The local port a bound socket listens on.
absl::StatusOr<int> BoundPort(int socket_fd);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_PORT_CHECK_H_
