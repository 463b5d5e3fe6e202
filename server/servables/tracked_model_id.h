// TrackedModelId: a served model's name in the tracking allocator.
#ifndef CASTSERVE_SERVER_SERVABLES_TRACKED_MODEL_ID_H_
#define CASTSERVE_SERVER_SERVABLES_TRACKED_MODEL_ID_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "casting/device/device.h"

namespace castserve {

// A model id registered with the process's tracking allocator while the
// object lives, so that allocations made under casting::ScopedModelTag(id())
// count for the model. Ids are unique per object ("<name>#<n>"): a reload's
// new model is measured apart from the old one. Without an installed
// tracking allocator nothing is registered and live_bytes() is 0. The id is
// also registered with casting::DeviceModelMemory::Global() for the bytes
// the model holds on CUDA devices.
// Thread-safe.
class TrackedModelId {
 public:
  static std::unique_ptr<TrackedModelId> Register(absl::string_view name);
  ~TrackedModelId();
  TrackedModelId(const TrackedModelId&) = delete;
  TrackedModelId& operator=(const TrackedModelId&) = delete;

  const std::string& id() const { return id_; }
  // Bytes the tracking allocator attributes to the id now.
  int64_t live_bytes() const;
  // The id's highest live bytes since registration.
  int64_t peak_bytes() const;
  // Whether a model on `device` has device bytes of its own, counted apart
  // from the tracking allocator's (a CUDA device): the one place a servable
  // asks what kind of device its model is on.
  static bool HasDeviceBytes(const casting::Device& device);
  // The same as live_bytes() and peak_bytes() on `device` when it
  // HasDeviceBytes (casting/memory/device_model_memory.h; the id is registered
  // there too), else 0: also 0 without CUDA or without the tracking
  // allocator (whose tag the attribution reads).
  int64_t device_live_bytes(const casting::Device& device) const;
  int64_t device_peak_bytes(const casting::Device& device) const;

 private:
  TrackedModelId(std::string id, bool registered)
      : id_(std::move(id)), registered_(registered) {}

  const std::string id_;
  const bool registered_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_TRACKED_MODEL_ID_H_
