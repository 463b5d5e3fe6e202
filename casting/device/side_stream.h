// SideStream: a second stream on a model's device for work that overlaps the
// forward (the prefetch of the next module's compute copies,
// models/casting_hooks.h), and the one synchronization point back to the
// forward's stream.
//
// On CUDA: Run executes its function with a stream from LibTorch's pool as
// the current stream of the device (so DecodeTensor, ToDevice and the caching
// allocator enqueue there) and records an event after it; WaitOnCurrentStream
// makes the calling thread's current stream (the forward's) wait for the
// last recorded event (cudaStreamWaitEvent), without blocking the host.
// Tensors made in Run and used on the forward's stream must be declared
// there with RecordOnCurrentStream (casting/device/device_codec.h;
// Weight::Acquire does it), so that the caching allocator does not reuse them
// early. On the CPU: Run just calls the function; WaitOnCurrentStream does
// nothing.
//
// Written against LibTorch's device-generic stream and event interfaces: no
// CUDA header, and in a build without CUDA a CUDA SideStream cannot be made
// (LibTorch throws c10::Error: no CUDA device type registered).
//
// Thread safety: Run and WaitOnCurrentStream may be called concurrently
// from different threads (typically one prefetch thread runs, forwards
// wait).
#ifndef CASTSERVE_CASTING_DEVICE_SIDE_STREAM_H_
#define CASTSERVE_CASTING_DEVICE_SIDE_STREAM_H_

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "casting/device/device.h"

namespace castserve::casting {

class SideStream {
 public:
  explicit SideStream(const Device& device);
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  const Device& device() const { return device_; }

  // Runs `work` with the side stream current on the device; then records the
  // event forwards wait for.
  void Run(absl::FunctionRef<void()> work) ABSL_LOCKS_EXCLUDED(mu_);

  // The current stream of the calling thread waits (on the device, not on
  // the host) for everything Run enqueued so far.
  void WaitOnCurrentStream() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Device device_;
  // Set on CUDA only.
  std::optional<c10::Stream> stream_;
  mutable absl::Mutex mu_;
  std::optional<c10::Event> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_DEVICE_SIDE_STREAM_H_
