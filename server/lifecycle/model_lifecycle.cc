#include "server/lifecycle/model_lifecycle.h"

#include <algorithm>
#include <utility>

namespace castserve {

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
  }
  return "UNAVAILABLE";
}

ModelStatus ModelLifecycle::StatusOf(const std::string& name) const {
  ModelStatus status{name, "1", state_, reason_};
  if (state_ == ModelState::kReady) status.tier = tier_;
  return status;
}

std::shared_ptr<ServedModel> ModelLifecycle::ready() const {
  return state_ == ModelState::kReady ? served_ : nullptr;
}

bool ModelLifecycle::SetNotLoaded(std::string reason, bool loads_on_request) {
  if (busy_ || served_ != nullptr) return false;
  reason_ = std::move(reason);
  loads_on_request_ = loads_on_request;
  return true;
}

void ModelLifecycle::Claim(bool on_request, absl::Time memory_wait_cap) {
  busy_ = true;
  claimed_on_request_ = on_request;
  load_retryable_ = false;
  load_deadline_ = absl::InfinitePast();
  memory_wait_cap_ = memory_wait_cap;
  if (on_request) loads_on_request_ = false;
}

void ModelLifecycle::ExtendLoadDeadline(absl::Time deadline) {
  load_deadline_ =
      std::max(load_deadline_, std::min(deadline, memory_wait_cap_));
}

void ModelLifecycle::SetWaitingForMemory(std::string reason) {
  waiting_for_memory_ = !reason.empty();
  if (served_ != nullptr || state_ != ModelState::kLoading) return;
  reason_ = waiting_for_memory_ ? std::move(reason) : "loading";
}

void ModelLifecycle::ReserveForLoad(int64_t bytes) {
  load_reserved_bytes_ = bytes;
}

void ModelLifecycle::SetLoadTiers(const TierBytes& bytes,
                                  const TierSettings& settings) {
  load_tier_bytes_ = bytes;
  load_tier_settings_ = settings;
}

void ModelLifecycle::SetMeasured(const ServedModel* model, int64_t bytes,
                                 uint64_t tier_changes) {
  if (model != nullptr && model == served_.get() &&
      tier_changes == tier_changes_) {
    measured_bytes_ = bytes;
  }
}

int64_t ModelLifecycle::served_bytes() const {
  return served_ != nullptr ? std::max(reserved_bytes_, measured_bytes_) : 0;
}

int64_t ModelLifecycle::accounted_bytes() const {
  return served_bytes() + load_reserved_bytes_ + promotion_reserved_bytes_;
}

void ModelLifecycle::StartLoad(
    std::shared_ptr<models::Cancellation> cancellation) {
  loading_ = std::move(cancellation);
  if (served_ == nullptr) {
    state_ = ModelState::kLoading;
    reason_ = "loading";
  }
}

bool ModelLifecycle::CancelLoad(const std::string& reason) {
  if (loading_ == nullptr) return false;
  loading_->Cancel(reason);
  return true;
}

ModelLifecycle::LoadOutcome ModelLifecycle::FinishLoad(
    std::shared_ptr<ServedModel> created, const absl::Status& status,
    absl::Time now, std::shared_ptr<ServedModel>* replaced,
    int64_t* replaced_bytes) {
  busy_ = false;
  loading_.reset();
  waiting_for_memory_ = false;
  const int64_t load_reserved_bytes = load_reserved_bytes_;
  load_reserved_bytes_ = 0;
  const std::optional<TierBytes> load_tier_bytes = load_tier_bytes_;
  load_tier_bytes_.reset();
  *replaced_bytes = 0;
  if (created != nullptr) {
    *replaced_bytes = served_bytes();
    *replaced = std::move(served_);
    served_ = std::move(created);
    reserved_bytes_ = load_reserved_bytes;
    measured_bytes_ = 0;
    tier_ = casting::WeightTier::kHot;
    tier_bytes_ = load_tier_bytes.value_or(TierBytes::Flat(reserved_bytes_));
    tier_settings_ = load_tier_settings_;
    last_moved_ = absl::InfinitePast();
    demotion_failed_ = false;
    promotions_noted_ = 0;
    failure_code_ = absl::StatusCode::kOk;
    state_ = ModelState::kReady;
    reason_.clear();
    loads_on_request_ = false;
    last_used_ = now;
    return LoadOutcome::kReady;
  }
  if (served_ != nullptr) {
    state_ = ModelState::kReady;
    return LoadOutcome::kKeptLoaded;
  }
  state_ = ModelState::kUnavailable;
  reason_ = std::string(status.message());
  failure_code_ = status.code();
  if (claimed_on_request_ && load_retryable_) loads_on_request_ = true;
  return LoadOutcome::kFailed;
}

std::shared_ptr<ServedModel> ModelLifecycle::StartUnload() {
  std::shared_ptr<ServedModel> draining = std::move(served_);
  reserved_bytes_ = measured_bytes_ = 0;
  tier_ = casting::WeightTier::kHot;
  failure_code_ = absl::StatusCode::kOk;
  state_ = draining ? ModelState::kUnloading : ModelState::kUnavailable;
  reason_ = draining ? "unloading: waiting for in-flight requests" : "unloaded";
  loads_on_request_ = false;
  return draining;
}

void ModelLifecycle::FinishUnload() {
  state_ = ModelState::kUnavailable;
  reason_ = "unloaded";
  busy_ = false;
}

std::optional<casting::WeightTier> ModelLifecycle::NextDemotion() const {
  if (demotion_failed_) return std::nullopt;
  return NextTierDown(tier_bytes_, tier_, tier_settings_.floor);
}

int64_t ModelLifecycle::FreeableBytes() const {
  if (!tier_settings_.pinned) return served_bytes();
  return std::max<int64_t>(
      served_bytes() - tier_bytes_.at(tier_settings_.floor), 0);
}

std::shared_ptr<ServedModel> ModelLifecycle::HoldForRequest() {
  std::shared_ptr<ServedModel> served = ready();
  if (served == nullptr) return nullptr;
  // One count of request_holds_ and a reference to the model for as long
  // as the request holds the pointer below (or a copy of it).
  request_holds_->fetch_add(1);
  ServedModel* const model = served.get();
  return std::shared_ptr<ServedModel>(
      model, [served = std::move(served),
              holds = request_holds_](ServedModel*) mutable {
        holds->fetch_sub(1);
        served.reset();
      });
}

bool ModelLifecycle::Movable() const {
  return !busy_ && !moving_ && !promoting_ && state_ == ModelState::kReady &&
         served_ != nullptr && served_->pending_requests() == 0 &&
         request_holds_->load() == 0;
}

std::shared_ptr<ServedModel> ModelLifecycle::StartMove() {
  moving_ = true;
  ++tier_changes_;
  return served_;
}

void ModelLifecycle::FinishMove(bool moved, casting::WeightTier tier,
                                absl::Time now, bool by_keep_alive) {
  moving_ = false;
  ++tier_changes_;
  if (!moved) demotion_failed_ = true;
  if (!moved || served_ == nullptr) return;
  tier_ = tier;
  reserved_bytes_ = tier_bytes_.at(tier);
  measured_bytes_ = 0;
  if (by_keep_alive) last_moved_ = now;
}

void ModelLifecycle::FinishPromotion(bool promoted, casting::WeightTier tier) {
  promoting_ = false;
  ++tier_changes_;
  promotion_reserved_bytes_ = 0;
  if (!promoted || served_ == nullptr) return;
  demotion_failed_ = false;
  tier_ = tier;
  reserved_bytes_ = tier_bytes_.at(tier);
  last_moved_ = absl::InfinitePast();
}

std::optional<ServedModel::PromotionTiming>
ModelLifecycle::NoteLastPromotion() {
  if (served_ == nullptr) return std::nullopt;
  const ServedModel::PromotionTiming last = served_->last_promotion();
  if (last.count == promotions_noted_) return std::nullopt;
  promotions_noted_ = last.count;
  wake_rates_.Note(last.bytes, last.from, last.took);
  return last;
}

bool ModelLifecycle::Evictable() const {
  return Movable() && !tier_settings_.pinned;
}

std::shared_ptr<ServedModel> ModelLifecycle::Evict() {
  state_ = ModelState::kUnavailable;
  reason_ =
      "evicted to stay within the memory budget; loads again on its next "
      "request";
  loads_on_request_ = true;
  reserved_bytes_ = measured_bytes_ = 0;
  tier_ = casting::WeightTier::kHot;
  failure_code_ = absl::StatusCode::kOk;
  return std::move(served_);
}

}  // namespace castserve
