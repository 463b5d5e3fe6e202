#include "server/lifecycle/lru_eviction_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace castserve {
namespace {

// Holders listed in a message: the largest first, this many at most.
constexpr size_t kMaxHoldersListed = 8;

}  // namespace

absl::Status LruEvictionPolicy::CheckAlone(const std::string& name,
                                           int64_t bytes,
                                           int64_t kept_bytes) const {
  // Compared without a sum: neither may overflow it.
  if (!has_budget() || bytes <= memory_budget_bytes_ - kept_bytes) {
    return absl::OkStatus();
  }
  if (kept_bytes > 0 && bytes <= memory_budget_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget exceeded: the reload of model ", name, " needs ", bytes,
        " bytes (its configured footprint) beside the ", kept_bytes,
        " bytes its loaded version holds until the new one replaces it, more "
        "than the whole budget: budget ",
        memory_budget_bytes_,
        " bytes (--memory-budget-bytes); unload the model first"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "memory budget exceeded: model ", name, " alone needs ", bytes,
      " bytes (its configured footprint), more than the whole budget: budget ",
      memory_budget_bytes_, " bytes (--memory-budget-bytes)"));
}

bool LruEvictionPolicy::Fits(int64_t held_bytes, int64_t needed_bytes) const {
  return !has_budget() || held_bytes + needed_bytes <= memory_budget_bytes_;
}

std::vector<std::string> LruEvictionPolicy::PickVictims(
    const std::vector<EvictionCandidate>& candidates, const std::string& keep,
    int64_t bytes_to_free) const {
  std::vector<const EvictionCandidate*> idle;
  for (const EvictionCandidate& candidate : candidates) {
    // Unloading a model that counts nothing (a cool one) would free nothing
    // the budget counts; its next request would pay a load.
    if (candidate.evictable && candidate.name != keep && candidate.bytes > 0) {
      idle.push_back(&candidate);
    }
  }
  std::sort(idle.begin(), idle.end(),
            [](const EvictionCandidate* a, const EvictionCandidate* b) {
              if (a->priority != b->priority) {
                return a->priority < b->priority;
              }
              return a->last_used < b->last_used;
            });
  const int64_t negligible_bytes = memory_budget_bytes_ / 1024;
  std::vector<std::string> victims;
  int64_t freed_bytes = 0;
  for (const bool negligible : {false, true}) {
    for (const EvictionCandidate* candidate : idle) {
      if (freed_bytes >= bytes_to_free) break;
      if ((candidate->bytes < negligible_bytes) != negligible) continue;
      victims.push_back(candidate->name);
      freed_bytes += candidate->bytes;
    }
  }
  if (freed_bytes < bytes_to_free) victims.clear();
  return victims;
}

std::string LruEvictionPolicy::Shortfall(
    const std::string& name, int64_t needed_bytes, int64_t held_bytes,
    const std::vector<BudgetHolder>& holders) const {
  std::vector<BudgetHolder> largest = holders;
  std::sort(largest.begin(), largest.end(),
            [](const BudgetHolder& a, const BudgetHolder& b) {
              return a.bytes > b.bytes;
            });
  const size_t listed = std::min(largest.size(), kMaxHoldersListed);
  std::string held =
      absl::StrJoin(largest.begin(), largest.begin() + listed, ", ",
                    [](std::string* out, const BudgetHolder& holder) {
                      absl::StrAppend(out, holder.name, " ", holder.bytes,
                                      " bytes (", holder.state, ")");
                    });
  if (listed < largest.size()) {
    absl::StrAppend(&held, ", and ", largest.size() - listed, " more");
  }
  return absl::StrCat("model ", name, " needs ", needed_bytes,
                      " bytes, budget ", memory_budget_bytes_, " bytes, ",
                      held_bytes,
                      " bytes held: ", held.empty() ? "none" : held);
}

absl::Status LruEvictionPolicy::NoRoomBeforeDeadline(
    const std::string& name, int64_t needed_bytes, int64_t held_bytes,
    const std::vector<BudgetHolder>& holders) const {
  return absl::ResourceExhaustedError(
      absl::StrCat("memory budget exceeded: ",
                   Shortfall(name, needed_bytes, held_bytes, holders),
                   "; none became idle before the deadline"));
}

std::string LruEvictionPolicy::WaitingReason(
    const std::string& name, int64_t needed_bytes, int64_t held_bytes,
    const std::vector<BudgetHolder>& holders) const {
  return absl::StrCat("waiting for memory: ",
                      Shortfall(name, needed_bytes, held_bytes, holders));
}

}  // namespace castserve
