// Which model to unload to stay within a memory budget: the least recently
// used one that is idle. The policy only decides; the ModelManager measures
// (MeasuredBytes), evicts and measures again. Immutable; thread-safe.
#ifndef CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_
#define CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/lifecycle/served_model.h"

namespace castserve {

// The bytes a model holds, measured. The tracking allocator sees what was
// allocated under the model's tag (weights made at load or by a forward,
// activations); the footprint sees the weights' own copies wherever they
// were made (also on a prefetch thread). The two overlap, so the larger one
// counts, never their sum.
int64_t MeasuredBytes(const ServedModel& model);

struct EvictionCandidate {
  std::string name;
  absl::Time last_used;
  bool evictable = false;  // READY, idle, nothing in flight.
};

class LruEvictionPolicy {
 public:
  // 0 means no budget: everything fits.
  explicit LruEvictionPolicy(int64_t memory_budget_bytes)
      : memory_budget_bytes_(memory_budget_bytes) {}

  bool has_budget() const { return memory_budget_bytes_ > 0; }
  int64_t memory_budget_bytes() const { return memory_budget_bytes_; }

  // RESOURCE_EXHAUSTED when model `name` alone (`bytes`) exceeds the
  // budget: then evicting others could not help.
  absl::Status CheckAlone(const std::string& name, int64_t bytes) const;

  // Whether `used_bytes` of READY models fit. Counting a loaded model
  // (`with_incoming`), up to the budget; before a load, strictly under it
  // (room must be left).
  bool Fits(int64_t used_bytes, bool with_incoming) const;

  // The least recently used evictable candidate other than `keep`; none
  // when no candidate can go.
  std::optional<std::string> PickVictim(
      const std::vector<EvictionCandidate>& candidates,
      const std::string& keep) const;

  // RESOURCE_EXHAUSTED for `used_bytes` over the budget with nothing left to
  // evict, for model `keep`.
  absl::Status NothingToEvict(const std::string& keep, int64_t used_bytes,
                              bool with_incoming) const;

 private:
  const int64_t memory_budget_bytes_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_LRU_EVICTION_POLICY_H_
