// The CUDA devices' memory, behind a LibTorch-free interface: what the
// server exports per device and attributes per model.
// //casting/memory:device_memory selects device_memory_cuda.cc with
// --config=cuda (LibTorch's caching allocator) and device_memory_none.cc
// otherwise (no CUDA device: nothing).
//
// Thread-safe.
#ifndef CASTSERVE_CASTING_MEMORY_DEVICE_MEMORY_H_
#define CASTSERVE_CASTING_MEMORY_DEVICE_MEMORY_H_

#include <memory>
#include <vector>

#include "casting/memory/memory_stats.h"

namespace castserve::casting {

// One DeviceMemoryStats per visible CUDA device (cuda_memory_stats.h),
// "cuda:0", "cuda:1", ...; empty in a build without CUDA or without a
// visible device.
std::vector<std::unique_ptr<DeviceMemoryStats>> NewCudaDeviceMemoryStats();

// Attaches, once per process, the caching allocator tracker that feeds
// DeviceModelMemory::Global() (device_model_memory.h says how allocations
// are attributed to models). True when it is attached (now or before);
// false in a build without CUDA or without a visible device.
bool InstallCudaModelMemoryTracker();

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_DEVICE_MEMORY_H_
