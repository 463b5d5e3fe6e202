#include "casting/memory/device_model_memory.h"

#include <algorithm>

namespace castserve::casting {

DeviceModelMemory& DeviceModelMemory::Global() {
  static DeviceModelMemory* const global = new DeviceModelMemory();
  return *global;
}

void DeviceModelMemory::Register(absl::string_view model_id) {
  absl::MutexLock lock(&mu_);
  models_.insert_or_assign(std::string(model_id), Counters());
}

void DeviceModelMemory::Unregister(absl::string_view model_id) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end()) return;
  it->second.registered = false;
  if (it->second.usage.live_bytes == 0) models_.erase(it);
}

void DeviceModelMemory::OnAllocate(absl::string_view model_id, int device,
                                   uint64_t address, int64_t bytes) {
  if (model_id.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end() || !it->second.registered) return;
  DeviceModelUsage& usage = it->second.usage;
  usage.live_bytes += bytes;
  usage.peak_bytes = std::max(usage.peak_bytes, usage.live_bytes);
  usage.window_peak_bytes = std::max(usage.window_peak_bytes, usage.live_bytes);
  blocks_[{device, address}] = Block{it->first, bytes};
}

void DeviceModelMemory::OnFree(int device, uint64_t address) {
  absl::MutexLock lock(&mu_);
  auto block = blocks_.find({device, address});
  if (block == blocks_.end()) return;
  auto it = models_.find(block->second.model_id);
  if (it != models_.end()) {
    it->second.usage.live_bytes -= block->second.bytes;
    if (!it->second.registered && it->second.usage.live_bytes == 0) {
      models_.erase(it);
    }
  }
  blocks_.erase(block);
}

DeviceModelUsage DeviceModelMemory::Usage(absl::string_view model_id) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end() || !it->second.registered) return {};
  return it->second.usage;
}

int64_t DeviceModelMemory::StartWindow(absl::string_view model_id) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end() || !it->second.registered) return 0;
  DeviceModelUsage& usage = it->second.usage;
  usage.window_peak_bytes = usage.live_bytes;
  return usage.live_bytes;
}

}  // namespace castserve::casting
