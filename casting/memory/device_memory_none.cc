// device_memory.h without CUDA: no device to report or track.
#include "casting/memory/device_memory.h"

namespace castserve::casting {

std::vector<std::unique_ptr<DeviceMemoryStats>> NewCudaDeviceMemoryStats() {
  return {};
}

bool InstallCudaModelMemoryTracker() { return false; }

}  // namespace castserve::casting
