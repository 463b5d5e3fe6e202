#include "server/http/port_check.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;

TEST(PortCheckTest, ListeningPortIsReportedInUse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);

  const absl::Status status = CheckPortAvailable("127.0.0.1", port);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("Address already in use"));
  close(fd);
  EXPECT_TRUE(CheckPortAvailable("127.0.0.1", port).ok());
}

TEST(PortCheckTest, UnresolvableAddressIsInvalidArgument) {
  const absl::Status status = CheckPortAvailable("no such host..", 8001);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("no such host.."));
}

TEST(PortCheckTest, BindTcpSocketOnPortZeroReportsTheChosenPort) {
  absl::StatusOr<int> fd = BindTcpSocket("127.0.0.1", 0);
  ASSERT_TRUE(fd.ok()) << fd.status();
  absl::StatusOr<int> port = BoundPort(*fd);
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  ASSERT_EQ(listen(*fd, 1), 0);
  EXPECT_FALSE(CheckPortAvailable("127.0.0.1", *port).ok());
  close(*fd);
}

}  // namespace
}  // namespace castserve
