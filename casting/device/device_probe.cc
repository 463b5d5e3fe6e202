#include "casting/device/device_probe.h"

#include "absl/strings/str_cat.h"

namespace castserve::casting {

absl::Status CheckDeviceAvailable(const Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
  if (!BuiltWithCuda()) {
    return absl::UnavailableError(absl::StrCat(
        device.name(),
        ": no CUDA device: castserve was built without CUDA: bazel build "
        "--config=cuda"));
  }
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError(absl::StrCat(
        device.name(), ": no CUDA device: the CUDA runtime sees none"));
  }
  if (device.index() >= count) {
    return absl::UnavailableError(
        absl::StrCat(device.name(), ": no CUDA device with index ",
                     device.index(), " (", count, " visible)"));
  }
  return absl::OkStatus();
}

}  // namespace castserve::casting
