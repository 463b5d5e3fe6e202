#ifndef CASTSERVE_CASTING_MEMORY_CUDA_MEMORY_STATS_H_
#define CASTSERVE_CASTING_MEMORY_CUDA_MEMORY_STATS_H_

#include <memory>

#include "casting/memory/memory_stats.h"

namespace castserve::casting {

// DeviceMemoryStats of one CUDA device, read from LibTorch's caching
// allocator (allocated bytes of live tensors, aggregate over pool types; the
// memory the cache reserves is not counted). ResetPeak resets the caching
// allocator's peak statistics of that device, for every reader in the process.
// Only built with --config=cuda against a LibTorch with CUDA
// (//casting/memory:cuda_memory_stats, tagged manual).
//
// Thread safety: as DeviceMemoryStats. `device_index` must name a visible
// device; the caching allocator checks it.
std::unique_ptr<DeviceMemoryStats> NewCudaMemoryStats(int device_index);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_CUDA_MEMORY_STATS_H_
