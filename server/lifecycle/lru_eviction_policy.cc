#include "server/lifecycle/lru_eviction_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace castserve {

int64_t MeasuredBytes(const ServedModel& model) {
  return std::max(model.tracked_bytes(), model.footprint().owned_bytes());
}

absl::Status LruEvictionPolicy::CheckAlone(const std::string& name,
                                           int64_t bytes) const {
  if (!has_budget() || bytes <= memory_budget_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("memory budget exceeded: model ", name, " alone needs ",
                   bytes, " bytes, budget ", memory_budget_bytes_, " bytes"));
}

bool LruEvictionPolicy::Fits(int64_t used_bytes, bool with_incoming) const {
  if (!has_budget()) return true;
  return with_incoming ? used_bytes <= memory_budget_bytes_
                       : used_bytes < memory_budget_bytes_;
}

std::optional<std::string> LruEvictionPolicy::PickVictim(
    const std::vector<EvictionCandidate>& candidates,
    const std::string& keep) const {
  const EvictionCandidate* victim = nullptr;
  for (const EvictionCandidate& candidate : candidates) {
    if (!candidate.evictable || candidate.name == keep) continue;
    if (victim == nullptr || candidate.last_used < victim->last_used) {
      victim = &candidate;
    }
  }
  if (victim == nullptr) return std::nullopt;
  return victim->name;
}

absl::Status LruEvictionPolicy::NothingToEvict(const std::string& keep,
                                               int64_t used_bytes,
                                               bool with_incoming) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "memory budget exceeded: ", used_bytes, " bytes in use ",
      with_incoming ? "with" : "before loading", " model ", keep, ", budget ",
      memory_budget_bytes_, " bytes, and no idle model left to evict"));
}

}  // namespace castserve
