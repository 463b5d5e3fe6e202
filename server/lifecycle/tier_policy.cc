#include "server/lifecycle/tier_policy.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace castserve {

using casting::WeightTier;

namespace {

constexpr WeightTier kTiers[] = {WeightTier::kHot, WeightTier::kWarm,
                                 WeightTier::kCool};

std::optional<WeightTier> FromProto(inference::MemoryTier tier) {
  switch (tier) {
    case inference::MEMORY_TIER_HOT:
      return WeightTier::kHot;
    case inference::MEMORY_TIER_WARM:
      return WeightTier::kWarm;
    case inference::MEMORY_TIER_COOL:
      return WeightTier::kCool;
    default:
      return std::nullopt;
  }
}

}  // namespace

int64_t TierBytes::at(WeightTier tier) const {
  switch (tier) {
    case WeightTier::kHot:
      return hot;
    case WeightTier::kWarm:
      return warm;
    case WeightTier::kCool:
      return cool;
  }
  return hot;
}

absl::StatusOr<WeightTier> ParseWeightTier(absl::string_view text) {
  for (WeightTier tier : kTiers) {
    if (text == casting::WeightTierName(tier)) return tier;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown memory tier '", text, "': expected hot, warm or cool"));
}

WeightTier EffectiveTier(const TierBytes& bytes, WeightTier requested) {
  for (WeightTier tier : kTiers) {
    if (bytes.at(tier) == bytes.at(requested)) return tier;
  }
  return requested;
}

std::optional<WeightTier> NextTierDown(const TierBytes& bytes,
                                       WeightTier current, WeightTier floor) {
  for (WeightTier tier : kTiers) {
    if (!Colder(tier, current) || Colder(tier, floor)) continue;
    if (bytes.at(tier) < bytes.at(current)) return tier;
  }
  return std::nullopt;
}

absl::Status ValidateMemoryTiers(const inference::ModelConfig& config) {
  const std::string& text = config.tiers().keep_alive();
  absl::Duration keep_alive;
  if (!text.empty() && (!absl::ParseDuration(text, &keep_alive) ||
                        keep_alive < absl::ZeroDuration())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name(), "': tiers.keep_alive '", text,
        "' is not a duration >= 0 (for example \"30s\", \"5m\", \"inf\")"));
  }
  return absl::OkStatus();
}

TierSettings TierSettingsOf(const inference::ModelConfig& config,
                            absl::Duration default_keep_alive) {
  TierSettings settings;
  settings.keep_alive = default_keep_alive;
  const std::string& text = config.tiers().keep_alive();
  if (!text.empty()) absl::ParseDuration(text, &settings.keep_alive);
  if (std::optional<WeightTier> pin = FromProto(config.tiers().pin())) {
    settings.floor = *pin;
    settings.pinned = true;
  }
  settings.priority = config.tiers().priority();
  return settings;
}

void WakeRates::Note(int64_t built_bytes, WeightTier from,
                     absl::Duration took) {
  if (built_bytes <= 0 || took <= absl::ZeroDuration()) return;
  const double rate = built_bytes / absl::ToDoubleSeconds(took);
  std::optional<double>& average = rates_[static_cast<int>(from)];
  average = average.has_value() ? (*average + rate) / 2 : rate;
}

std::optional<double> WakeRates::BytesPerSecond(WeightTier from) const {
  return rates_[static_cast<int>(from)];
}

std::optional<double> WakeRates::AnyBytesPerSecond() const {
  for (WeightTier tier : kTiers) {
    if (rates_[static_cast<int>(tier)].has_value()) {
      return rates_[static_cast<int>(tier)];
    }
  }
  return std::nullopt;
}

double ExpectedWakeRate(const WakeRates& model, const WakeRates& all,
                        WeightTier tier) {
  if (std::optional<double> rate = model.BytesPerSecond(tier)) return *rate;
  if (std::optional<double> rate = model.AnyBytesPerSecond()) return *rate;
  if (std::optional<double> rate = all.BytesPerSecond(tier)) return *rate;
  // Before any promotion was timed: what matters then is warm before cool
  // (the values are of the order promotions take on a CPU; castserve logs
  // each one it times).
  constexpr double kGigabyte = 1e9;
  return tier == WeightTier::kCool ? 2 * kGigabyte : 4 * kGigabyte;
}

std::optional<std::string> PickDemotion(
    const std::vector<TierCandidate>& candidates, const std::string& keep,
    absl::Time now) {
  const TierCandidate* best = nullptr;
  // Smaller is demoted first. An idle time of at least a millisecond keeps
  // a model just used comparable; never used is the longest idle.
  auto order = [now](const TierCandidate& c) {
    const double idle =
        std::max(absl::ToDoubleSeconds(now - c.last_used), 1e-3);
    return std::make_tuple(c.priority, -c.next_wake_rate * idle, c.last_used);
  };
  for (const TierCandidate& candidate : candidates) {
    if (!candidate.movable || !candidate.next || candidate.name == keep) {
      continue;
    }
    if (best == nullptr || order(candidate) < order(*best)) best = &candidate;
  }
  if (best == nullptr) return std::nullopt;
  return best->name;
}

int64_t FreeableBytes(const std::vector<TierCandidate>& candidates,
                      const std::string& keep) {
  int64_t bytes = 0;
  for (const TierCandidate& candidate : candidates) {
    if (candidate.movable && candidate.name != keep) {
      bytes += candidate.freeable_bytes;
    }
  }
  return bytes;
}

}  // namespace castserve
