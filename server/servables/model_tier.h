// A servable's memory tier (ServedModel::tier and MoveTo), over the model it
// runs: moves down go through models::Model::Demote; moves up mark the tier
// and start a promotion thread (models::Model::Promote) that builds back
// what the tier keeps, weight by weight, off the request path. Requests run
// meanwhile: a cool model serves from its mapped pages where the weights
// allow it (casting::Weight::ServesMappedWhenCool), and a forward waits only
// for the weight being promoted, if it needs that one. The next move cancels
// a promotion still running and waits for the weight it is on. A promotion
// that runs to its end is timed (last_promotion). What the batching and the
// generation servables share.
//
// Thread-safe: moves of one model run one at a time.
#ifndef CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_
#define CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "casting/memory/weight_tier.h"
#include "casting/weight.h"
#include "models/model.h"
#include "platform/executor.h"
#include "server/lifecycle/served_model.h"
#include "server/log.h"

namespace castserve {

class ModelTier {
 public:
  // `model` (not owned; may be null: a servable without a model only marks
  // its tier) outlives this object.
  explicit ModelTier(models::Model* model) : model_(model) {}
  ~ModelTier() {
    absl::MutexLock lock(&mu_);
    StopPromotionLocked();
  }
  ModelTier(const ModelTier&) = delete;
  ModelTier& operator=(const ModelTier&) = delete;

  casting::WeightTier tier() const { return tier_.load(); }

  // Demote cancels a promotion still running, waits for the forwards running
  // now (a generation step: the sequences keep their KV blocks) and holds
  // the next ones off only while it takes the weights' copies out; on
  // failure the tier stays. What it took out is freed before MoveTo returns
  // or, with `released` (ServedModel::MoveTo), when the caller lets go of
  // it. A move up returns once the promotion has started.
  absl::Status MoveTo(casting::WeightTier tier,
                      std::shared_ptr<const void>* released = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    StopPromotionLocked();
    const casting::WeightTier from = tier_.load();
    const bool colder = static_cast<int>(tier) > static_cast<int>(from);
    const bool warmer = static_cast<int>(tier) < static_cast<int>(from);
    if (model_ != nullptr && colder) {
      auto taken = std::make_shared<casting::ReleasedMemory>();
      if (absl::Status demoted = model_->Demote(tier, taken.get());
          !demoted.ok()) {
        return demoted;
      }
      if (released != nullptr) *released = std::move(taken);
    }
    tier_.store(tier);
    if (model_ != nullptr && warmer) {
      cancel_.store(false);
      promotion_status_ = absl::OkStatus();
      // Timed from the move up, not from when the thread runs: the wake
      // request's forward builds weights from now on too, and a promotion
      // started late would find them built and time almost nothing.
      const absl::Time start = absl::Now();
      promotion_ = platform::Executor::Default().StartThread([this, from, tier,
                                                              start] {
        int64_t built = 0;
        absl::Status promoted = model_->Promote(
            tier, [this] { return cancel_.load(); }, &built);
        if (!promoted.ok()) {
          // Nothing is lost: the forward that needs the weight builds it.
          Log(LogLevel::kWarning, "memory tier promotion stopped",
              {{"tier", std::string(casting::WeightTierName(tier))},
               {"error", promoted.ToString()}});
        } else if (!cancel_.load()) {
          absl::MutexLock timing_lock(&timing_mu_);
          timing_ = {from, tier, absl::Now() - start, built, timing_.count + 1};
        }
        promotion_status_ = std::move(promoted);
      });
    }
    return absl::OkStatus();
  }

  // The last promotion that built everything back (not cancelled).
  ServedModel::PromotionTiming last_promotion() const
      ABSL_LOCKS_EXCLUDED(timing_mu_) {
    absl::MutexLock lock(&timing_mu_);
    return timing_;
  }

  // Waits for the promotion running now, if any, and returns how the last
  // one ended (an error is met again by the forward that needs the weight:
  // nothing is lost). For tests.
  absl::Status WaitForPromotion() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (promotion_ != nullptr) promotion_->Join();
    return promotion_status_;
  }

 private:
  void StopPromotionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (promotion_ == nullptr) return;
    cancel_.store(true);
    promotion_->Join();
    promotion_.reset();
  }

  models::Model* const model_;
  absl::Mutex mu_;
  std::atomic<casting::WeightTier> tier_{casting::WeightTier::kHot};
  std::unique_ptr<platform::Thread> promotion_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancel_{false};
  // Written by the promotion thread, and by MoveTo and read by
  // WaitForPromotion only while that thread is joined (under mu_).
  absl::Status promotion_status_;
  // Never held with mu_ wanted: the ModelManager reads it under its own lock.
  mutable absl::Mutex timing_mu_;
  ServedModel::PromotionTiming timing_ ABSL_GUARDED_BY(timing_mu_);
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_MODEL_TIER_H_
