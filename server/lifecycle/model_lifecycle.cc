#include "server/lifecycle/model_lifecycle.h"

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
  return ModelStatus{name, "1", state_, reason_};
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

void ModelLifecycle::Claim(bool on_request) {
  busy_ = true;
  if (on_request) loads_on_request_ = false;
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
    absl::Time now, std::shared_ptr<ServedModel>* replaced) {
  busy_ = false;
  loading_.reset();
  if (created != nullptr) {
    *replaced = std::move(served_);
    served_ = std::move(created);
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
  return LoadOutcome::kFailed;
}

std::shared_ptr<ServedModel> ModelLifecycle::StartUnload() {
  std::shared_ptr<ServedModel> draining = std::move(served_);
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

bool ModelLifecycle::Evictable() const {
  return !busy_ && state_ == ModelState::kReady && served_ != nullptr &&
         served_->pending_requests() == 0;
}

std::shared_ptr<ServedModel> ModelLifecycle::Evict() {
  state_ = ModelState::kUnavailable;
  reason_ =
      "evicted to stay within the memory budget; loads again on its next "
      "request";
  loads_on_request_ = true;
  return std::move(served_);
}

}  // namespace castserve
