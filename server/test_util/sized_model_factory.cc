#include "server/test_util/sized_model_factory.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/time/time.h"

namespace castserve::testing {
namespace {

// The config's integer string parameter `key`, or `otherwise`.
int64_t IntegerParameter(const inference::ModelConfig& config,
                         const std::string& key, int64_t otherwise) {
  const auto bytes = config.parameters().find(key);
  return bytes == config.parameters().end()
             ? otherwise
             : std::atoll(bytes->second.string_value().c_str());
}

int64_t BytesOf(const inference::ModelConfig& config) {
  return IntegerParameter(config, "bytes", 100);
}

TierBytes TierBytesOf(const inference::ModelConfig& config) {
  const int64_t hot = BytesOf(config);
  const int64_t warm = IntegerParameter(config, "warm_bytes", hot);
  return {hot, warm, IntegerParameter(config, "cool_bytes", warm)};
}

}  // namespace

void HeldBytes::Add(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  now_ += bytes;
  most_ = std::max(most_, now_);
}

int64_t HeldBytes::now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

int64_t HeldBytes::most() const {
  absl::MutexLock lock(&mu_);
  return most_;
}

void HoldGate::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
}

void HoldGate::Release() {
  absl::MutexLock lock(&mu_);
  held_ = false;
}

void HoldGate::AwaitWaiting(int count) {
  absl::MutexLock lock(&mu_);
  auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return waiting_ >= count;
  };
  mu_.Await(absl::Condition(&reached));
}

bool HoldGate::Pass(const models::Cancellation* cancellation) {
  absl::MutexLock lock(&mu_);
  ++waiting_;
  bool passed = true;
  while (!mu_.AwaitWithTimeout(absl::Condition(
                                   +[](bool* held) { return !*held; }, &held_),
                               absl::Milliseconds(1))) {
    if (cancellation != nullptr && cancellation->cancelled()) {
      passed = false;
      break;
    }
  }
  --waiting_;
  return passed;
}

SizedServedModel::SizedServedModel(inference::ModelConfig config,
                                   TierBytes bytes, bool grow, HeldBytes* held,
                                   std::atomic<int>* live, HoldGate* frees)
    : config_(std::move(config)),
      bytes_(bytes),
      held_(held),
      live_(live),
      frees_(frees),
      grown_(!grow) {
  ++*live_;
  if (!grow) held_->Add(bytes_.hot);
}

SizedServedModel::~SizedServedModel() {
  held_->Add(-held_bytes());
  --*live_;
}

int64_t SizedServedModel::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return grown_ ? bytes_.at(held_tier_) : 0;
}

void SizedServedModel::Grow() {
  absl::MutexLock lock(&mu_);
  held_->Add(grown_.exchange(true) ? bytes_.hot - bytes_.at(held_tier_)
                                   : bytes_.hot);
  held_tier_ = casting::WeightTier::kHot;
}

absl::Status SizedServedModel::MoveTo(casting::WeightTier tier,
                                      std::shared_ptr<const void>* released) {
  const casting::WeightTier from = tier_.exchange(tier);
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(tier) < static_cast<int>(from) &&
      config_.parameters().count("promotion_ms") > 0) {
    promotion_ = {
        from, tier,
        absl::Milliseconds(IntegerParameter(config_, "promotion_ms", 0)),
        bytes_.at(tier) - bytes_.at(from), promotion_.count + 1};
  }
  if (static_cast<int>(tier) <= static_cast<int>(held_tier_)) {
    return absl::OkStatus();  // Up: its next request grows it back.
  }
  const int64_t freed = grown_ ? bytes_.at(held_tier_) - bytes_.at(tier) : 0;
  held_tier_ = tier;
  if (released == nullptr) {
    held_->Add(-freed);
    return absl::OkStatus();
  }
  HeldBytes* const held = held_;
  HoldGate* const frees = frees_;
  *released = std::shared_ptr<const void>(new int64_t(freed),
                                          [held, frees](const int64_t* bytes) {
                                            frees->Pass();
                                            held->Add(-*bytes);
                                            delete bytes;
                                          });
  return absl::OkStatus();
}

void SizedServedModel::Infer(InferenceCall,
                             std::function<void(absl::Status)> done) {
  ++pending_;
  ++requests_;
  Grow();
  --pending_;
  done(absl::OkStatus());
}

casting::Footprint SizedServedModel::footprint() const {
  ++footprint_reads_;
  casting::Footprint footprint;
  footprint.AddResident("f32", held_bytes());
  return footprint;
}

absl::StatusOr<std::shared_ptr<ServedModel>> SizedModelFactory::Create(
    const std::string& model_directory, const inference::ModelConfig& config,
    std::shared_ptr<const models::Cancellation> cancellation) {
  ++creates_;
  if (!creates_gate_.Pass(cancellation.get())) {
    return absl::CancelledError(cancellation->reason());
  }
  if (config.parameters().count("fail") > 0) {
    return absl::FailedPreconditionError(
        config.parameters().at("fail").string_value());
  }
  return std::make_shared<SizedServedModel>(
      config, TierBytesOf(config), config.parameters().count("grow") > 0,
      &held_, &live_models_, &frees_);
}

absl::StatusOr<int64_t> SizedModelFactory::ProjectedBytes(
    const std::string& model_directory, const inference::ModelConfig& config) {
  return BytesOf(config);
}

absl::StatusOr<TierBytes> SizedModelFactory::ProjectedTierBytes(
    const std::string& model_directory, const inference::ModelConfig& config) {
  return TierBytesOf(config);
}

}  // namespace castserve::testing
