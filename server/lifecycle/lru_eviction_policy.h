// Which models to unload to stay within a memory budget: the least recently
// used idle ones that count bytes against it (never one that counts none, a
// cool model's), and only when unloading them makes room. The policy only
// decides and words the refusals; the ModelManager accounts (reservations and
// ServedModel::measured_bytes), evicts and waits. Immutable; thread-safe.
#ifndef CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_
#define CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/lifecycle/served_model.h"

namespace castserve {

struct EvictionCandidate {
  std::string name;
  absl::Time last_used;
  bool evictable = false;  // READY, idle, nothing in flight.
  int64_t bytes = 0;       // What it counts against the budget.
  int priority = 0;        // Lower priorities go first (tiers.priority).
};

// One model's share of the budget, as a refusal lists it.
struct BudgetHolder {
  std::string name;
  int64_t bytes = 0;
  // What it is doing (ModelManager's words): "idle", "loading",
  // "reloading", "1 request in flight", "unloaded, still in use".
  std::string state;
};

class LruEvictionPolicy {
 public:
  // 0 means no budget: everything fits.
  explicit LruEvictionPolicy(int64_t memory_budget_bytes)
      : memory_budget_bytes_(memory_budget_bytes) {}

  bool has_budget() const { return memory_budget_bytes_ > 0; }
  int64_t memory_budget_bytes() const { return memory_budget_bytes_; }

  // RESOURCE_EXHAUSTED when model `name` alone (`bytes`) exceeds the
  // budget, or, for a reload, does not fit beside the `kept_bytes` the
  // version it replaces holds until the swap: then evicting others or
  // waiting could not help.
  absl::Status CheckAlone(const std::string& name, int64_t bytes,
                          int64_t kept_bytes = 0) const;

  // Whether `needed_bytes` more fit beside `held_bytes`.
  bool Fits(int64_t held_bytes, int64_t needed_bytes) const;

  // The evictable candidates other than `keep`, lowest priority first, then
  // least recently used,
  // whose bytes together reach `bytes_to_free`; none when all of them
  // together would not (waiting for busy models may then make room: better
  // than unloading idle ones for nothing). Never a model that counts no
  // bytes, and one that counts under 1/1024 of the budget (a cool model's
  // buffers) only when the others do not make room: unloading it frees
  // next to nothing, and its next request pays a load instead of a wake.
  std::vector<std::string> PickVictims(
      const std::vector<EvictionCandidate>& candidates, const std::string& keep,
      int64_t bytes_to_free) const;

  // RESOURCE_EXHAUSTED: model `name` needs `needed_bytes`, the budget is
  // held by `holders` (`held_bytes` in all), none of which went idle or was
  // freed before the deadline.
  absl::Status NoRoomBeforeDeadline(
      const std::string& name, int64_t needed_bytes, int64_t held_bytes,
      const std::vector<BudgetHolder>& holders) const;
  // The reason a load shows while it waits, in the same words.
  std::string WaitingReason(const std::string& name, int64_t needed_bytes,
                            int64_t held_bytes,
                            const std::vector<BudgetHolder>& holders) const;

 private:
  std::string Shortfall(const std::string& name, int64_t needed_bytes,
                        int64_t held_bytes,
                        const std::vector<BudgetHolder>& holders) const;

  const int64_t memory_budget_bytes_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_
