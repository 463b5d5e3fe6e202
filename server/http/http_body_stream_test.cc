#include "server/http/http_body_stream.h"

#include <string>

#include "gtest/gtest.h"

namespace castserve {
namespace {

// A connection that counts how often it was parked and woken.
struct FakeConnection {
  int suspends = 0;
  int resumes = 0;
  bool peer_closed = false;

  HttpBodyStream::Connection Bind() {
    return {[this] { ++suspends; }, [this] { ++resumes; },
            [this] { return peer_closed; }};
  }
};

std::string ReadSome(HttpBodyStream& stream, size_t max) {
  std::string out(max, '\0');
  const ssize_t n = stream.Read(out.data(), max);
  return n > 0 ? out.substr(0, n) : "";
}

TEST(HttpBodyStreamTest, ReadsWhatWasWrittenInOrderThenTheEnd) {
  FakeConnection connection;
  HttpBodyStream stream(1024);
  stream.Attach(connection.Bind());
  ASSERT_TRUE(stream.Write("data: 1\n\n"));
  ASSERT_TRUE(stream.Write("data: 2\n\n"));
  EXPECT_EQ(ReadSome(stream, 4), "data");
  EXPECT_EQ(ReadSome(stream, 100), ": 1\n\ndata: 2\n\n");
  stream.Close();
  char byte;
  EXPECT_EQ(stream.Read(&byte, 1), HttpBodyStream::kEndOfStream);
  EXPECT_EQ(connection.suspends, 0);
  EXPECT_FALSE(stream.Write("late")) << "written after Close";
}

TEST(HttpBodyStreamTest, ParksWhenNothingWaitsAndWakesOnWriteAndClose) {
  FakeConnection connection;
  HttpBodyStream stream(1024);
  stream.Attach(connection.Bind());
  char byte;
  EXPECT_EQ(stream.Read(&byte, 1), 0);
  EXPECT_EQ(connection.suspends, 1);
  ASSERT_TRUE(stream.Write("x"));
  EXPECT_EQ(connection.resumes, 1);
  EXPECT_EQ(ReadSome(stream, 8), "x");
  EXPECT_EQ(stream.Read(&byte, 1), 0);
  stream.Close();
  EXPECT_EQ(connection.resumes, 2);
  EXPECT_EQ(stream.Read(&byte, 1), HttpBodyStream::kEndOfStream);
  // Writes while not parked wake nothing.
  EXPECT_EQ(connection.suspends, 2);
}

TEST(HttpBodyStreamTest, ClientThatFallsBehindTheBufferIsCutOff) {
  FakeConnection connection;
  HttpBodyStream stream(8);
  stream.Attach(connection.Bind());
  ASSERT_TRUE(stream.Write("12345"));
  EXPECT_FALSE(stream.ClientGone());
  EXPECT_FALSE(stream.Write("6789")) << "13 bytes would wait, the limit is 8";
  EXPECT_TRUE(stream.ClientGone());
  char byte;
  EXPECT_EQ(stream.Read(&byte, 1), HttpBodyStream::kCutOff);
  EXPECT_FALSE(stream.Write("1"));
}

TEST(HttpBodyStreamTest, ClientGoneWhenParkedPeerClosedOrDetached) {
  FakeConnection connection;
  HttpBodyStream stream(64);
  stream.Attach(connection.Bind());
  connection.peer_closed = true;
  EXPECT_FALSE(stream.ClientGone()) << "not parked: the server polls it";
  char byte;
  ASSERT_EQ(stream.Read(&byte, 1), 0);
  EXPECT_TRUE(stream.ClientGone());
  connection.peer_closed = false;
  stream.Detach();
  EXPECT_TRUE(stream.ClientGone());
  EXPECT_FALSE(stream.Write("x"));
  stream.Close();
  EXPECT_EQ(connection.resumes, 0) << "a detached stream wakes nothing";
}

}  // namespace
}  // namespace castserve
