#include "casting/device/side_stream.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "casting/device/torch_types.h"

namespace castserve::casting {

SideStream::SideStream(const Device& device) : device_(device) {
  if (device.is_cpu()) return;
  const c10::Device torch_device = TorchDevice(device);
  stream_ = c10::impl::VirtualGuardImpl(torch_device.type())
                .getStreamFromGlobalPool(torch_device);
}

void SideStream::Run(absl::FunctionRef<void()> work) {
  if (!stream_.has_value()) {
    work();
    return;
  }
  {
    const c10::StreamGuard guard(*stream_);
    work();
  }
  absl::MutexLock lock(&mu_);
  if (!done_.has_value()) done_.emplace(stream_->device_type());
  done_->record(*stream_);
}

void SideStream::WaitOnCurrentStream() const {
  if (!stream_.has_value()) return;
  const c10::impl::VirtualGuardImpl guard(stream_->device_type());
  const c10::Stream current = guard.getStream(stream_->device());
  absl::MutexLock lock(&mu_);
  if (done_.has_value()) done_->block(current);
}

}  // namespace castserve::casting
