#include "casting/memory/cuda_memory_stats.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <string>

namespace castserve::casting {
namespace {

namespace caching = ::c10::cuda::CUDACachingAllocator;

// Index of the "all pools" entry of a StatArray (StatType::AGGREGATE, whose
// enclosing namespace differs between LibTorch versions).
constexpr size_t kAggregate = 0;

class CudaMemoryStats final : public DeviceMemoryStats {
 public:
  explicit CudaMemoryStats(int device_index) : device_index_(device_index) {}

  int64_t AllocatedBytes() const override {
    return caching::getDeviceStats(device_index_)
        .allocated_bytes[kAggregate]
        .current;
  }

  int64_t PeakAllocatedBytes() const override {
    return caching::getDeviceStats(device_index_)
        .allocated_bytes[kAggregate]
        .peak;
  }

  void ResetPeak() override { caching::resetPeakStats(device_index_); }

  std::string DeviceName() const override {
    return "cuda:" + std::to_string(device_index_);
  }

 private:
  const int device_index_;
};

}  // namespace

std::unique_ptr<DeviceMemoryStats> NewCudaMemoryStats(int device_index) {
  return std::make_unique<CudaMemoryStats>(device_index);
}

}  // namespace castserve::casting
