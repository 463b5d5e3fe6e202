// Memory tiers: how much of what its weight policy configures a loaded
// model keeps between forwards. LibTorch-free, so that the lifecycle can
// name the tiers it moves models through.
#ifndef CASTSERVE_CASTING_MEMORY_WEIGHT_TIER_H_
#define CASTSERVE_CASTING_MEMORY_WEIGHT_TIER_H_

#include "absl/strings/string_view.h"

namespace castserve::casting {

// Hottest first; a tier keeps a subset of what the tiers above it keep.
enum class WeightTier {
  kHot,   // Everything the policy configures, as serving builds it.
  kWarm,  // No cached compute copies: the storage (resident or mapped) only.
  kCool,  // Nothing resident: the mapped checkpoint pages only.
};

// "hot", "warm", "cool": the names configs, the API and metrics use.
constexpr absl::string_view WeightTierName(WeightTier tier) {
  switch (tier) {
    case WeightTier::kHot:
      return "hot";
    case WeightTier::kWarm:
      return "warm";
    case WeightTier::kCool:
      return "cool";
  }
  return "unknown";
}

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_WEIGHT_TIER_H_
