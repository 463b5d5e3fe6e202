// ServedModelHandle: what every servable kind shares between the object the
// lifecycle holds and the state its worker threads hold. A servable keeps its
// state (queue, engine, recorder, model) in a `body` that is itself a
// ServedModel, shared with the threads that run its requests, which may
// outlive the handle by the time it takes them to notice it is gone. The
// handle forwards ServedModel's calls to the body, written once here; the
// servable's destructor says what letting go of the handle does (stop the
// queue, or hand the body to another thread when the last reference drops on
// its own worker).
//
// Thread safety: as the body's.
#ifndef CASTSERVE_SERVER_SERVABLES_SERVED_MODEL_HANDLE_H_
#define CASTSERVE_SERVER_SERVABLES_SERVED_MODEL_HANDLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/tracked_model_id.h"

namespace castserve {

// `model`'s memory by device, what a servable's memory_usage() reports: on a
// CUDA device a GPU entry with device_bytes() and a CPU entry with what the
// tracking allocator holds for it besides; on the CPU, ServedModel's default
// (one CPU entry).
inline std::vector<MemoryUsageEntry> MemoryUsageOf(const ServedModel& model) {
  const casting::Device device = model.device();
  if (!TrackedModelId::HasDeviceBytes(device)) {
    return model.ServedModel::memory_usage();
  }
  const int64_t device_bytes = model.device_bytes();
  return {{"CPU", 0, model.tracked_bytes() - device_bytes},
          {"GPU", device.index(), device_bytes}};
}

class ServedModelHandle : public ServedModel {
 public:
  const inference::ModelConfig& config() const final { return body_->config(); }
  const std::vector<TensorSpec>& inputs() const final {
    return body_->inputs();
  }
  const std::vector<TensorSpec>& outputs() const final {
    return body_->outputs();
  }
  void Infer(InferenceCall call, std::function<void(absl::Status)> done) final {
    body_->Infer(std::move(call), std::move(done));
  }
  int64_t pending_requests() const final { return body_->pending_requests(); }
  ServedModelStatistics statistics() const final { return body_->statistics(); }
  casting::Footprint footprint() const final { return body_->footprint(); }
  int64_t tracked_bytes() const final { return body_->tracked_bytes(); }
  casting::Device device() const final { return body_->device(); }
  int64_t device_bytes() const final { return body_->device_bytes(); }
  ServedModelActivity activity() const final { return body_->activity(); }
  std::vector<MemoryUsageEntry> memory_usage() const final {
    return MemoryUsageOf(*body_);
  }
  casting::WeightTier tier() const final { return body_->tier(); }
  using ServedModel::MoveTo;
  absl::Status MoveTo(casting::WeightTier tier,
                      std::shared_ptr<const void>* released) final {
    return body_->MoveTo(tier, released);
  }
  PromotionTiming last_promotion() const final {
    return body_->last_promotion();
  }

 protected:
  // `body` is not null.
  explicit ServedModelHandle(std::shared_ptr<ServedModel> body)
      : body_(std::move(body)) {}

  // The servable's own state; null only after its destructor moved it away.
  std::shared_ptr<ServedModel> body_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_SERVED_MODEL_HANDLE_H_
