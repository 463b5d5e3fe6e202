// ModelManagerImpl's memory tiers (model_manager.h): explicit moves,
// pressure demotions, promotions and keep_alive.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/lifecycle/model_manager_impl.h"
#include "server/lifecycle/tier_policy.h"
#include "server/log.h"
#include "server/metrics/lifecycle_metrics.h"

namespace castserve::lifecycle_internal {

absl::Status ModelManagerImpl::MoveTo(const std::string& name,
                                      casting::WeightTier tier) {
  if (absl::Status valid = ModelCatalog::ValidateName(name); !valid.ok()) {
    return valid;
  }
  if (!memory_tiers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot move model ", name,
        " between memory tiers: memory tiers are off (--memory-tiers=false)"));
  }
  std::optional<Move> move;
  std::optional<Promotion> promotion;
  const absl::Time deadline = clock_.Now() + max_wait_for_memory_;
  {
    absl::MutexLock lock(&mu_);
    if (models_.count(name) == 0 && !catalog_.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    ModelLifecycle& model = models_[name];
    // One move or promotion of a model at a time.
    while (model.ready() != nullptr &&
           (model.moving() || model.promoting() || model.busy())) {
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", name, " is still moving, loading or being promoted"));
      }
      AwaitChangeLocked(deadline);
    }
    std::shared_ptr<ServedModel> ready = model.ready();
    if (ready == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("model ", name, " is not READY: ", model.reason()));
    }
    const TierSettings& settings = model.tier_settings();
    if (settings.pinned && Colder(tier, settings.floor)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model ", name, " is pinned at tier ",
          casting::WeightTierName(settings.floor),
          " (tiers.pin): it cannot move to ", casting::WeightTierName(tier)));
    }
    const casting::WeightTier target = EffectiveTier(model.tier_bytes(), tier);
    if (target == model.tier()) return absl::OkStatus();
    if (Colder(target, model.tier())) {
      move = StartMoveLocked(name, target, "api");
    } else {
      model.StartPromotion();
      promotion = Promotion{ready, model.tier(), target, "api"};
    }
  }
  if (move.has_value()) return RunMove(*std::move(move));
  return Promote(name, *std::move(promotion), deadline);
}

ModelManagerImpl::Move ModelManagerImpl::StartMoveLocked(
    const std::string& name, casting::WeightTier to, const char* cause) {
  ModelLifecycle& model = models_[name];
  const casting::WeightTier from = model.tier();
  return Move{name, model.StartMove(), from, to, cause};
}

absl::Status ModelManagerImpl::RunMove(Move move) {
  // Bounded: Demote waits only for the forwards running now. What it took
  // out of the weights is freed below, once the move has ended and the
  // model's requests may run (freeing a large model's pages takes longer
  // than taking them out); it counts against the budget until then.
  std::shared_ptr<const void> released;
  absl::Status moved = move.model->MoveTo(move.to, &released);
  // Counted until its memory is returned, not only until its last
  // reference goes.
  released = SignalWhenFreed(std::move(released));
  move.model.reset();
  {
    absl::MutexLock lock(&mu_);
    ModelLifecycle& model = models_[move.name];
    const int64_t counted = model.accounted_bytes();
    model.FinishMove(moved.ok(), move.to, clock_.Now(),
                     std::string(move.cause) == "keep_alive");
    CountUntilFreedLocked(move.name, released,
                          counted - model.accounted_bytes(), kBeingFreed);
    NoteAccountingLocked();
    NoteChangeLocked();
  }
  released.reset();
  if (moved.ok()) ReturnFreedMemoryToTheSystem();
  absl::MutexLock lock(&mu_);
  if (moved.ok()) {
    Log(LogLevel::kInfo, "moved model to a colder memory tier",
        {{"model", move.name},
         {"from", std::string(casting::WeightTierName(move.from))},
         {"to", std::string(casting::WeightTierName(move.to))},
         {"cause", move.cause}});
    LifecycleMetrics::Global().RecordTierMove(move.name, move.from, move.to,
                                              move.cause);
  } else {
    Log(LogLevel::kWarning, "memory tier move failed",
        {{"model", move.name}, {"error", moved.ToString()}});
  }
  NoteAccountingLocked();
  NoteChangeLocked();
  return moved;
}

std::optional<ModelManagerImpl::Move> ModelManagerImpl::StartPressureMoveLocked(
    const std::string& keep, int64_t bytes_to_free) {
  if (!memory_tiers_) return std::nullopt;
  std::vector<TierCandidate> candidates;
  for (auto& [name, model] : models_) {
    if (model.ready() == nullptr) continue;
    NoteWakeRateLocked(name, model);
    TierCandidate candidate{name, model.last_used(),
                            model.tier_settings().priority, model.Movable(),
                            model.NextDemotion()};
    if (candidate.next.has_value()) {
      candidate.next_wake_rate = ExpectedWakeRate(
          model.wake_rates(), all_wake_rates_, *candidate.next);
    }
    candidate.freeable_bytes = model.FreeableBytes();
    candidates.push_back(std::move(candidate));
  }
  if (FreeableBytes(candidates, keep) < bytes_to_free) return std::nullopt;
  const std::optional<std::string> victim =
      PickDemotion(candidates, keep, clock_.Now());
  if (!victim.has_value()) return std::nullopt;
  return StartMoveLocked(*victim, *models_[*victim].NextDemotion(), "pressure");
}

void ModelManagerImpl::NoteWakeRateLocked(const std::string& name,
                                          ModelLifecycle& model) {
  const std::optional<ServedModel::PromotionTiming> woke =
      model.NoteLastPromotion();
  if (!woke.has_value()) return;
  all_wake_rates_.Note(woke->bytes, woke->from, woke->took);
  if (std::optional<double> rate =
          model.wake_rates().BytesPerSecond(woke->from)) {
    LifecycleMetrics::Global().SetWakeRate(name, woke->from, *rate);
  }
  Log(LogLevel::kInfo, "memory tier promotion timed",
      {{"model", name},
       {"from", std::string(casting::WeightTierName(woke->from))},
       {"to", std::string(casting::WeightTierName(woke->to))},
       {"seconds", absl::StrCat(absl::ToDoubleSeconds(woke->took))},
       {"bytes", absl::StrCat(woke->bytes)}});
}

absl::Status ModelManagerImpl::Promote(const std::string& name,
                                       Promotion promotion,
                                       absl::Time deadline) {
  int64_t bytes;
  {
    absl::MutexLock lock(&mu_);
    const TierBytes& tiers = models_[name].tier_bytes();
    bytes =
        std::max<int64_t>(tiers.at(promotion.to) - tiers.at(promotion.from), 0);
  }
  absl::Status reserved = absl::OkStatus();
  if (eviction_.has_budget()) {
    reserved = ReserveMemory(name, bytes, *cancel_all_, deadline);
  }
  // Marks it: the next forward builds back what the tier keeps.
  if (reserved.ok()) reserved = promotion.model->MoveTo(promotion.to);
  promotion.model.reset();
  absl::MutexLock lock(&mu_);
  models_[name].FinishPromotion(reserved.ok(), promotion.to);
  if (reserved.ok()) {
    Log(LogLevel::kInfo, "moved model to a warmer memory tier",
        {{"model", name},
         {"from", std::string(casting::WeightTierName(promotion.from))},
         {"to", std::string(casting::WeightTierName(promotion.to))},
         {"cause", promotion.cause}});
    LifecycleMetrics::Global().RecordTierMove(name, promotion.from,
                                              promotion.to, promotion.cause);
  }
  NoteAccountingLocked();
  NoteChangeLocked();
  return reserved;
}

void ModelManagerImpl::MaybeStartKeepAliveLocked(const ModelLifecycle& model) {
  if (!memory_tiers_ || keep_alive_thread_ != nullptr ||
      cancel_all_->cancelled() ||
      model.tier_settings().keep_alive == absl::InfiniteDuration()) {
    return;
  }
  keep_alive_thread_ = executor_.StartThread([this] { RunKeepAlive(); });
}

void ModelManagerImpl::RunKeepAlive() {
  for (;;) {
    std::optional<Move> move;
    {
      absl::MutexLock lock(&mu_);
      if (cancel_all_->cancelled()) return;
      absl::Time next_check = absl::InfiniteFuture();
      move = StartKeepAliveMoveLocked(&next_check);
      if (!move.has_value()) {
        clock_.WaitWithDeadline(&changed_, &mu_, next_check);
        continue;
      }
    }
    RunMove(*std::move(move)).IgnoreError();
  }
}

std::optional<ModelManagerImpl::Move>
ModelManagerImpl::StartKeepAliveMoveLocked(absl::Time* next_check) {
  const absl::Time now = clock_.Now();
  for (auto& [name, model] : models_) {
    // Not a copy of the pointer: Movable counts the references.
    const ServedModel* ready = model.ready().get();
    const absl::Duration keep_alive = model.tier_settings().keep_alive;
    if (ready == nullptr || keep_alive == absl::InfiniteDuration() ||
        !model.NextDemotion().has_value()) {
      continue;
    }
    // Idleness counts from the end of the last request: one in flight
    // keeps the model in use.
    const bool in_flight = ready->pending_requests() > 0;
    if (in_flight) model.MarkUsed(now);
    const absl::Time due = model.idle_since() + keep_alive;
    if (due > now) {
      *next_check = std::min(
          *next_check,
          in_flight ? std::min(due, now + kKeepAliveInFlightCheckInterval)
                    : due);
      continue;
    }
    if (model.Movable()) {
      return StartMoveLocked(name, *model.NextDemotion(), "keep_alive");
    }
    // Held for a moment (a request about to run, a measurement).
    *next_check = std::min(*next_check, now + kIdleCheckInterval);
  }
  return std::nullopt;
}

}  // namespace castserve::lifecycle_internal
