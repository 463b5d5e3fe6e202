// Memory tiers as the lifecycle sees them (casting/memory/weight_tier.h):
// what a model holds in each tier, which tiers its config lets it reach,
// its ModelConfig.tiers settings, and which demotion the memory budget takes
// next. Decides only; the ModelManager moves models and accounts.
// LibTorch-free; everything here is a plain value or a pure function.
#ifndef CASTSERVE_SERVER_LIFECYCLE_TIER_POLICY_H_
#define CASTSERVE_SERVER_LIFECYCLE_TIER_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "casting/memory/weight_tier.h"
#include "proto/model_config.pb.h"

namespace castserve {

// The bytes a model holds in each tier once it serves (its configured
// footprint there), known before any data is read. hot >= warm >= cool.
// A tier that frees nothing against the one above it (a policy without
// cached compute copies: hot == warm) is never moved to: the model stays in
// the tier above (EffectiveTier).
struct TierBytes {
  int64_t hot = 0;
  int64_t warm = 0;
  int64_t cool = 0;

  // Every tier holds `bytes`: a model that cannot move.
  static TierBytes Flat(int64_t bytes) { return {bytes, bytes, bytes}; }
  int64_t at(casting::WeightTier tier) const;
};

// Hotter first: kHot < kWarm < kCool.
inline bool Colder(casting::WeightTier a, casting::WeightTier b) {
  return static_cast<int>(a) > static_cast<int>(b);
}

// "hot", "warm", "cool" -> the tier; INVALID_ARGUMENT naming `text` else.
absl::StatusOr<casting::WeightTier> ParseWeightTier(absl::string_view text);

// The tier a move to `requested` lands in: the hottest tier holding the
// same bytes as `requested` (a tier that frees nothing is skipped).
casting::WeightTier EffectiveTier(const TierBytes& bytes,
                                  casting::WeightTier requested);

// The first tier below `current`, not below `floor`, that holds fewer
// bytes than `current`; nullopt when none does.
std::optional<casting::WeightTier> NextTierDown(const TierBytes& bytes,
                                                casting::WeightTier current,
                                                casting::WeightTier floor);

// ModelConfig.tiers, checked.
struct TierSettings {
  // Idleness after which the model is demoted one tier; InfiniteDuration:
  // never.
  absl::Duration keep_alive = absl::InfiniteDuration();
  // Never below this tier; kCool when unpinned.
  casting::WeightTier floor = casting::WeightTier::kCool;
  // Pinned models are never unloaded by the memory budget.
  bool pinned = false;
  int priority = 0;
};

// INVALID_ARGUMENT naming tiers.keep_alive and its text when it is not an
// absl duration >= 0 ("" is fine: the server's default).
absl::Status ValidateMemoryTiers(const inference::ModelConfig& config);

// The settings of a config ValidateMemoryTiers accepted; an empty
// keep_alive takes `default_keep_alive`.
TierSettings TierSettingsOf(const inference::ModelConfig& config,
                            absl::Duration default_keep_alive);

// How fast promotions have built back what demotions dropped, in bytes per
// second, by the tier a promotion started from: the bytes a promotion built
// itself (ServedModel::PromotionTiming::bytes) over the time it took. Each
// rate is a moving average (the last promotion weighs half). Not
// thread-safe: the ModelManager keeps one per model and one for all models
// under its lock.
class WakeRates {
 public:
  // A promotion from `from` that built `built_bytes` back in `took`;
  // ignores one that built nothing or took no time.
  void Note(int64_t built_bytes, casting::WeightTier from, absl::Duration took);
  // nullopt until a promotion from `from` was noted.
  std::optional<double> BytesPerSecond(casting::WeightTier from) const;
  // From the warmest tier a promotion started from; nullopt before any.
  std::optional<double> AnyBytesPerSecond() const;

 private:
  std::optional<double> rates_[3];
};

// Bytes per second at which a model demoted to `tier` is expected to wake:
// its own promotions from `tier`, else its promotions from another tier (a
// model that built back fast from one tier does from the other), else every
// model's from `tier`, else a prior: warm wakes twice as fast as cool (a
// warm model rebuilds compute copies from resident storage, a cool one its
// storage from the checkpoint first).
double ExpectedWakeRate(const WakeRates& model, const WakeRates& all,
                        casting::WeightTier tier);

// A model as the pressure path sees it.
struct TierCandidate {
  std::string name;
  absl::Time last_used;
  int priority = 0;
  // READY, idle, no move or load running, no reference held outside the
  // manager.
  bool movable = false;
  // Where its next demotion goes (nullopt: none left above its floor).
  std::optional<casting::WeightTier> next;
  // The bytes per second at which it would wake from `next`
  // (ExpectedWakeRate).
  double next_wake_rate = 1;
  // Every demotion down to its floor, and, when unpinned, the unload after
  // them: what the candidate could free in all.
  int64_t freeable_bytes = 0;
};

// The demotion to take next among `candidates` other than `keep`: the lower
// priority first; among equal priorities the one whose freed bytes are
// cheapest to wake back, weighed by how long it has been idle: the largest
// next_wake_rate x (now - last_used), so a model idle twice as long as
// another goes first unless the other wakes more than twice as fast; then
// the least recently used. nullopt when none is left.
std::optional<std::string> PickDemotion(
    const std::vector<TierCandidate>& candidates, const std::string& keep,
    absl::Time now);

// What the movable `candidates` other than `keep` could free in all, by
// demotions and unloads.
int64_t FreeableBytes(const std::vector<TierCandidate>& candidates,
                      const std::string& keep);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_TIER_POLICY_H_
