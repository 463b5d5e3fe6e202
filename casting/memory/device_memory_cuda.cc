// device_memory.h with CUDA: LibTorch's caching allocator.
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <string>

#include "casting/device/device_probe.h"
#include "casting/memory/cuda_memory_stats.h"
#include "casting/memory/device_memory.h"
#include "casting/memory/device_model_memory.h"
#include "casting/memory/tracking_allocator.h"

namespace castserve::casting {
namespace {

using ::c10::CachingDeviceAllocator::TraceEntry;

// Called under the caching allocator's lock on the allocating (or freeing)
// thread; DeviceModelMemory takes only its own mutex.
void OnTrace(const TraceEntry& entry) {
  switch (entry.action_) {
    case TraceEntry::ALLOC:
      DeviceModelMemory::Global().OnAllocate(ScopedModelTag::CurrentModelId(),
                                             entry.device_,
                                             static_cast<uint64_t>(entry.addr_),
                                             static_cast<int64_t>(entry.size_));
      break;
    case TraceEntry::FREE_REQUESTED:
      DeviceModelMemory::Global().OnFree(entry.device_,
                                         static_cast<uint64_t>(entry.addr_));
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<std::unique_ptr<DeviceMemoryStats>> NewCudaDeviceMemoryStats() {
  std::vector<std::unique_ptr<DeviceMemoryStats>> stats;
  for (int index = 0; index < CudaDeviceCount(); ++index) {
    stats.push_back(NewCudaMemoryStats(index));
  }
  return stats;
}

bool InstallCudaModelMemoryTracker() {
  static const bool installed = [] {
    if (CudaDeviceCount() == 0) return false;
    ::c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(OnTrace);
    return true;
  }();
  return installed;
}

}  // namespace castserve::casting
