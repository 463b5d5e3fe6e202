#include "server/lifecycle/tier_policy.h"

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

std::optional<std::string> PickDemotion(
    const std::vector<TierCandidate>& candidates, const std::string& keep) {
  const TierCandidate* best = nullptr;
  auto order = [](const TierCandidate& c) {
    return std::make_tuple(static_cast<int>(c.tier), c.priority, c.last_used);
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
