#include "server/http/http_body_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace castserve {

bool HttpBodyStream::Write(absl::string_view bytes) {
  bool parked = false;
  bool written = false;
  {
    absl::MutexLock lock(&mutex_);
    if (closed_ || cut_off_ || detached_) return false;
    if (pending_.size() - read_offset_ + bytes.size() > max_pending_bytes_) {
      cut_off_ = true;
    } else {
      pending_.append(bytes.data(), bytes.size());
      written = true;
    }
    std::swap(parked, parked_);
  }
  ResumeIfParked(parked);
  return written;
}

void HttpBodyStream::Close() {
  bool parked = false;
  {
    absl::MutexLock lock(&mutex_);
    closed_ = true;
    std::swap(parked, parked_);
  }
  ResumeIfParked(parked);
}

bool HttpBodyStream::ClientGone() {
  absl::MutexLock lock(&mutex_);
  if (cut_off_ || detached_) return true;
  // A parked connection is not polled: nobody else would notice.
  return parked_ && connection_.peer_closed();
}

void HttpBodyStream::Attach(Connection connection) {
  absl::MutexLock lock(&mutex_);
  connection_ = std::move(connection);
}

ssize_t HttpBodyStream::Read(char* out, size_t max) {
  absl::MutexLock lock(&mutex_);
  if (cut_off_) return kCutOff;
  const size_t available = pending_.size() - read_offset_;
  if (available > 0) {
    const size_t n = std::min(available, max);
    std::memcpy(out, pending_.data() + read_offset_, n);
    read_offset_ += n;
    if (read_offset_ == pending_.size()) {
      pending_.clear();
      read_offset_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
  if (closed_) return kEndOfStream;
  // Under the lock, so that Write and Close resume only a parked
  // connection.
  parked_ = true;
  connection_.suspend();
  return 0;
}

void HttpBodyStream::Detach() {
  absl::MutexLock lock(&mutex_);
  detached_ = true;
  parked_ = false;
  pending_.clear();
  read_offset_ = 0;
}

void HttpBodyStream::ResumeIfParked(bool parked) {
  if (!parked) return;
  std::function<void()> resume;
  {
    absl::MutexLock lock(&mutex_);
    resume = connection_.resume;
  }
  // Outside the lock: libmicrohttpd takes locks of its own. The connection
  // stays parked until this call, so it is still open.
  resume();
}

}  // namespace castserve
