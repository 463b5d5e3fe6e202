// HttpBodyStream: the body of an HTTP response that is sent while it is
// being made (server-sent events, say). A service gives an HttpResponse
// whose `stream` is set; its status, headers and `body` go out at once, then
// each Write as the client takes it, until Close ends the body.
//
// What is written and not yet sent waits in a buffer of at most
// `max_pending_bytes`: a client that falls further behind is cut off (the
// connection closes, ClientGone turns true) instead of holding memory, so a
// producer never blocks on a slow client.
//
// Producer side (Write, Close, ClientGone): thread-safe, never blocks on the
// network. Server side (Attach, Read, Detach): HttpServer's polling threads
// only.
#ifndef CASTSERVE_SERVER_HTTP_HTTP_BODY_STREAM_H_
#define CASTSERVE_SERVER_HTTP_HTTP_BODY_STREAM_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace castserve {

class HttpBodyStream {
 public:
  explicit HttpBodyStream(size_t max_pending_bytes)
      : max_pending_bytes_(max_pending_bytes) {}

  // Queues `bytes` for the client. False (and nothing queued) once the
  // stream is closed, cut off or the client is gone; false and cut off
  // when the bytes waiting would exceed max_pending_bytes.
  bool Write(absl::string_view bytes);
  // The body ends after what was written. Call it exactly once, also when
  // the client is gone.
  void Close();
  // True once the client closed its connection, the stream was cut off, or
  // the whole body was sent.
  bool ClientGone();

  // How the server reaches the connection the stream is sent on.
  struct Connection {
    // Parks the connection until resume (called from Read only).
    std::function<void()> suspend;
    // Wakes a parked connection (from any thread).
    std::function<void()> resume;
    // Whether the peer closed its end; called only while parked.
    std::function<bool()> peer_closed;
  };
  // Once, before the first Read.
  void Attach(Connection connection);

  // Read's answers besides a byte count.
  static constexpr ssize_t kEndOfStream = -1;
  static constexpr ssize_t kCutOff = -2;
  // Up to `max` bytes for the client into `out`: their count; kEndOfStream
  // once the stream is closed and all was read; kCutOff when it was cut
  // off; 0 after parking the connection (nothing to send yet: Write or
  // Close wake it).
  ssize_t Read(char* out, size_t max);
  // The response is gone (sent, or its connection closed): later writes
  // are refused.
  void Detach();

 private:
  // Wakes the connection when it is parked; the caller holds no lock.
  void ResumeIfParked(bool parked);

  const size_t max_pending_bytes_;
  absl::Mutex mutex_;
  std::string pending_ ABSL_GUARDED_BY(mutex_);
  // Bytes of pending_ already read (dropped when all are).
  size_t read_offset_ ABSL_GUARDED_BY(mutex_) = 0;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  bool cut_off_ ABSL_GUARDED_BY(mutex_) = false;
  bool detached_ ABSL_GUARDED_BY(mutex_) = false;
  bool parked_ ABSL_GUARDED_BY(mutex_) = false;
  Connection connection_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_HTTP_BODY_STREAM_H_
