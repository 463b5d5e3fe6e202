// A servable's memory tier (ServedModel::tier and MoveTo), over the model it
// runs: moves down go through models::Model::Demote, moves up only mark the
// tier (the next forward builds back). What the batching and the generation
// servables share.
//
// Thread-safe: moves of one model run one at a time.
#ifndef CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_
#define CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "casting/memory/weight_tier.h"
#include "models/model.h"

namespace castserve {

class ModelTier {
 public:
  // `model` (not owned; may be null: a servable without a model only marks
  // its tier) outlives this object.
  explicit ModelTier(models::Model* model) : model_(model) {}

  casting::WeightTier tier() const { return tier_.load(); }

  // Demote waits for the forwards running now (a generation step: the
  // sequences keep their KV blocks) and holds the next ones off only while
  // it frees the weights' copies. On failure the tier stays.
  absl::Status MoveTo(casting::WeightTier tier) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (model_ != nullptr &&
        static_cast<int>(tier) > static_cast<int>(tier_.load())) {
      if (absl::Status demoted = model_->Demote(tier); !demoted.ok()) {
        return demoted;
      }
    }
    tier_.store(tier);
    return absl::OkStatus();
  }

 private:
  models::Model* const model_;
  absl::Mutex mu_;
  std::atomic<casting::WeightTier> tier_{casting::WeightTier::kHot};
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_
