// TrackedModelId: a served model's name in the tracking allocator.
#ifndef CASTSERVE_SERVER_TRACKED_MODEL_ID_H_
#define CASTSERVE_SERVER_TRACKED_MODEL_ID_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

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
  // The same on CUDA devices (casting/device_model_memory.h; the id is
  // registered there too): 0 without CUDA or without the tracking allocator
  // (whose tag the attribution reads).
  int64_t device_live_bytes() const;
  int64_t device_peak_bytes() const;

 private:
  TrackedModelId(std::string id, bool registered)
      : id_(std::move(id)), registered_(registered) {}

  const std::string id_;
  const bool registered_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_TRACKED_MODEL_ID_H_
