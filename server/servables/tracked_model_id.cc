#include "server/servables/tracked_model_id.h"

#include <atomic>

#include "absl/memory/memory.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "casting/memory/device_model_memory.h"
#include "casting/memory/tracking_allocator.h"

namespace castserve {

std::unique_ptr<TrackedModelId> TrackedModelId::Register(
    absl::string_view name) {
  static std::atomic<uint64_t> next_serial{1};
  std::string id = absl::StrCat(name, "#", next_serial.fetch_add(1));
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  const bool registered =
      allocator != nullptr && allocator->RegisterModel(id).ok();
  casting::DeviceModelMemory::Global().Register(id);
  return absl::WrapUnique(new TrackedModelId(std::move(id), registered));
}

TrackedModelId::~TrackedModelId() {
  casting::DeviceModelMemory::Global().Unregister(id_);
  if (registered_) {
    casting::TrackingAllocator::Installed()->UnregisterModel(id_).IgnoreError();
  }
}

int64_t TrackedModelId::live_bytes() const {
  if (!registered_) return 0;
  absl::StatusOr<casting::ModelMemoryUsage> usage =
      casting::TrackingAllocator::Installed()->GetModelUsage(id_);
  return usage.ok() ? usage->live_bytes : 0;
}

int64_t TrackedModelId::peak_bytes() const {
  if (!registered_) return 0;
  absl::StatusOr<casting::ModelMemoryUsage> usage =
      casting::TrackingAllocator::Installed()->GetModelUsage(id_);
  return usage.ok() ? usage->peak_bytes : 0;
}

bool TrackedModelId::HasDeviceBytes(const casting::Device& device) {
  return device.is_cuda();
}

int64_t TrackedModelId::device_live_bytes(const casting::Device& device) const {
  if (!HasDeviceBytes(device)) return 0;
  return casting::DeviceModelMemory::Global().Usage(id_).live_bytes;
}

int64_t TrackedModelId::device_peak_bytes(const casting::Device& device) const {
  if (!HasDeviceBytes(device)) return 0;
  return casting::DeviceModelMemory::Global().Usage(id_).peak_bytes;
}

}  // namespace castserve
