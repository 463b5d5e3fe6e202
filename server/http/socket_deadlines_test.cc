#include "server/http/socket_deadlines.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"

namespace castserve {
namespace {

constexpr absl::Duration kCheckInterval = absl::Milliseconds(20);

// A connected pair of stream sockets whose reads give up after 2 s.
struct SocketPair {
  SocketPair() {
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
    const timeval timeout{2, 0};
    for (int fd : fds) {
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    }
  }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2];
};

TEST(SocketDeadlinesTest, ShutsDownASocketPastItsDeadline) {
  SocketDeadlines deadlines(kCheckInterval);
  SocketPair pair;
  const absl::Time start = absl::Now();
  deadlines.Set(pair.fds[0], start + absl::Milliseconds(100));
  char byte;
  // The peer sees the end of the stream: 0, not the 2 s read timeout.
  EXPECT_EQ(read(pair.fds[1], &byte, 1), 0);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(SocketDeadlinesTest, MovedAndForgottenDeadlinesLeaveTheSocketOpen) {
  SocketDeadlines deadlines(kCheckInterval);
  SocketPair moved;
  SocketPair forgotten;
  deadlines.Set(moved.fds[0], absl::Now() + absl::Milliseconds(50));
  deadlines.Set(moved.fds[0], absl::Now() + absl::Hours(1));
  deadlines.Set(forgotten.fds[0], absl::Now() + absl::Milliseconds(50));
  deadlines.Forget(forgotten.fds[0]);
  absl::SleepFor(absl::Milliseconds(200));
  for (const SocketPair* pair : {&moved, &forgotten}) {
    ASSERT_EQ(write(pair->fds[1], "x", 1), 1);
    char byte = 0;
    EXPECT_EQ(read(pair->fds[0], &byte, 1), 1);
    EXPECT_EQ(byte, 'x');
  }
}

TEST(SocketDeadlinesTest, DeadlinesAreTimesOfTheClock) {
  platform::test_util::FakeClock clock;
  SocketDeadlines deadlines(kCheckInterval, clock);
  SocketPair pair;
  deadlines.SetAfter(pair.fds[0], absl::Hours(1));
  pollfd peer{pair.fds[1], POLLIN, 0};
  // An hour of the clock has not passed: nothing to read, no end.
  EXPECT_EQ(poll(&peer, 1, /*timeout_ms=*/50), 0);
  clock.Advance(absl::Hours(1));
  char byte;
  EXPECT_EQ(read(pair.fds[1], &byte, 1), 0);  // The end, within the 2 s.
}

}  // namespace
}  // namespace castserve
