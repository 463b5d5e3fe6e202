#include "server/http/port_check.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace castserve {

absl::StatusOr<int> BindTcpSocket(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resolve bind address '", address, "': ", gai_strerror(rc)));
  }
  absl::Cleanup free_found = [found] { freeaddrinfo(found); };
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket(): ", std::strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    const int error = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", address, ":", port, ": ", std::strerror(error)));
  }
  return fd;
}

absl::Status CheckPortAvailable(const std::string& address, int port) {
  absl::StatusOr<int> fd = BindTcpSocket(address, port);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return absl::OkStatus();
}

absl::StatusOr<int> BoundPort(int socket_fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (getsockname(socket_fd, reinterpret_cast<sockaddr*>(&bound), &length) !=
      0) {
    return absl::InternalError(
        absl::StrCat("getsockname(): ", std::strerror(errno)));
  }
  if (bound.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace castserve
