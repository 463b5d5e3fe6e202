// One model's lifecycle state machine, as the ModelManager drives it:
//
//   UNAVAILABLE --StartLoad--> LOADING --FinishLoad--> READY
//   READY --StartUnload--> UNLOADING --FinishUnload--> UNAVAILABLE
//   READY --Evict--> UNAVAILABLE (loads again on its next request)
//
// with a reason whenever it is not READY. A reload (StartLoad while READY)
// keeps serving the loaded model until FinishLoad swaps the new one in; a
// failed reload keeps the old one. A load is cancellable until it finishes
// (CancelLoad). At most one load or unload runs at a time: the manager
// claims the model (Claim) before either and FinishLoad / FinishUnload
// release it.
//
// Memory accounting (the ModelManager's budget): a load reserves the model's
// configured footprint before it builds anything (ReserveForLoad); on success
// the reservation passes to the loaded model. A loaded model counts as the
// larger of its reservation and its last measurement (SetMeasured), a
// running load as its reservation (a reload counts both). A transition that
// lets go of a model hands its bytes to the caller, who counts them until the
// model is freed.
//
// Memory tiers (tier_policy.h): a READY model sits in a tier, hot after its
// load; it counts the larger of its tier's projected bytes and its last
// measurement. A move (StartMove .. FinishMove) runs outside the manager's
// lock and counts the tier it leaves until it ends; a promotion
// (StartPromotion .. FinishPromotion) first reserves the bytes back up to
// hot beside what the model counts (ReservePromotion), then marks it hot.
//
// Not thread-safe: the ModelManager guards every ModelLifecycle with its
// lock. Models are handed out, never released under that lock: what a
// transition lets go of comes back to the caller to release unlocked.
#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_LIFECYCLE_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_LIFECYCLE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "models/cancellation.h"
#include "server/lifecycle/served_model.h"
#include "server/lifecycle/tier_policy.h"

namespace castserve {

enum class ModelState { kUnavailable, kLoading, kReady, kUnloading };

// "UNAVAILABLE", "LOADING", "READY", "UNLOADING" (Triton's strings).
const char* ModelStateName(ModelState state);

struct ModelStatus {
  std::string name;
  std::string version;  // "1": one version per model directory.
  ModelState state = ModelState::kUnavailable;
  std::string reason;  // Empty when READY.
  // READY only: the memory tier.
  std::optional<casting::WeightTier> tier;
};

class ModelLifecycle {
 public:
  ModelState state() const { return state_; }
  const std::string& reason() const { return reason_; }
  ModelStatus StatusOf(const std::string& name) const;

  // The model requests go to while READY; null in every other state.
  std::shared_ptr<ServedModel> ready() const;
  // ready(), as handed to a request (GetReady): while the request, or any
  // copy of what it got, holds it, the model is not Movable. References
  // taken otherwise (ready(): measurements, a metrics scrape) do not count.
  std::shared_ptr<ServedModel> HoldForRequest();
  // A load or unload has claimed the model.
  bool busy() const { return busy_; }
  // Why the model is not READY: the code of the last failed load
  // (RESOURCE_EXHAUSTED when it did not get memory), OK otherwise.
  absl::StatusCode failure_code() const { return failure_code_; }
  // GetReady may start a load (a first_request model, an evicted one).
  bool loads_on_request() const { return loads_on_request_; }
  absl::Time last_used() const { return last_used_; }
  void MarkUsed(absl::Time now) { last_used_ = now; }

  // Describes a model that is not loaded and not busy: why (`reason`), and
  // whether GetReady may load it. Ignored (false) while loaded or busy.
  bool SetNotLoaded(std::string reason, bool loads_on_request);

  // Marks a load or unload as running; the model must not be busy. A load
  // GetReady starts (`on_request`) is not retried on its own after a
  // failure: the reason stays visible until an explicit load. A load this
  // claim runs waits for memory until `memory_wait_cap` at the latest,
  // whoever asks it to wait longer (computed once per load, at the claim).
  void Claim(bool on_request = false,
             absl::Time memory_wait_cap = absl::InfiniteFuture());

  // A claimed load begins: LOADING unless a model is loaded (a reload).
  void StartLoad(std::shared_ptr<models::Cancellation> cancellation);

  // Until when the claimed load may wait for memory: the latest `deadline`
  // asked for since the claim (by the load itself, by requests waiting for
  // it), never past the claim's memory_wait_cap. InfinitePast right after
  // Claim.
  void ExtendLoadDeadline(absl::Time deadline);
  absl::Time load_deadline() const { return load_deadline_; }
  // While the claimed load waits for memory: `reason` says why (the model's
  // reason when it is not loaded); empty once it stops waiting.
  void SetWaitingForMemory(std::string reason);
  bool waiting_for_memory() const { return waiting_for_memory_; }
  // The claimed load got `bytes` of the budget.
  void ReserveForLoad(int64_t bytes);
  // What the claimed load's model holds in each tier, and its settings:
  // kept with the model FinishLoad makes READY. Without them it is a model
  // that cannot move (its reservation in every tier).
  void SetLoadTiers(const TierBytes& bytes, const TierSettings& settings);
  // The claimed load fails for a reason that may pass (no memory before its
  // deadline while busy models held it): if GetReady started it, a later
  // request may start another.
  void MarkLoadRetryable() { load_retryable_ = true; }

  // Counts the starts and ends of moves and promotions: a measurement is
  // of one tier only if no move or promotion began or ended while it ran.
  uint64_t tier_changes() const { return tier_changes_; }
  // The measured bytes of `model`, taken since tier_changes() was
  // `tier_changes`: kept if `model` is the one serving and its tier did not
  // change meanwhile (a stale measurement would count a tier it left).
  void SetMeasured(const ServedModel* model, int64_t bytes,
                   uint64_t tier_changes);
  // What the model counts against the budget now: the loaded model's larger
  // of reservation and measurement, plus a running load's reservation.
  int64_t accounted_bytes() const;
  // The loaded model's part of accounted_bytes(): what a transition that
  // lets go of it hands over.
  int64_t served_bytes() const;
  // Cancels the running load, if any; true if there was one.
  bool CancelLoad(const std::string& reason);

  enum class LoadOutcome { kReady, kKeptLoaded, kFailed };
  // Ends the load and releases the claim: READY on `created`; a failure
  // (`created` null) leaves a loaded model READY and otherwise makes the
  // model UNAVAILABLE with `status`'s message. `*replaced` receives the
  // model `created` replaced, `*replaced_bytes` what it counted. A load
  // GetReady started that failed retryable (MarkLoadRetryable) may start
  // again on a later request.
  LoadOutcome FinishLoad(std::shared_ptr<ServedModel> created,
                         const absl::Status& status, absl::Time now,
                         std::shared_ptr<ServedModel>* replaced,
                         int64_t* replaced_bytes);

  // A claimed unload begins: UNLOADING while the returned model (null when
  // none was loaded) drains, UNAVAILABLE "unloaded" otherwise. No load on
  // request until an explicit one.
  std::shared_ptr<ServedModel> StartUnload();
  // UNAVAILABLE "unloaded"; releases the claim.
  void FinishUnload();

  // --- Memory tiers ---
  casting::WeightTier tier() const { return tier_; }
  const TierBytes& tier_bytes() const { return tier_bytes_; }
  const TierSettings& tier_settings() const { return tier_settings_; }
  bool moving() const { return moving_; }
  bool promoting() const { return promoting_; }
  // Since when the keep_alive timer runs: the last use or keep_alive move.
  absl::Time idle_since() const { return std::max(last_used_, last_moved_); }
  // Where a demotion takes it next (not below its pin): nullopt when none
  // frees anything, or after a failed move.
  std::optional<casting::WeightTier> NextDemotion() const;
  // What the demotions down to its pin and, unpinned, the unload after them
  // could free.
  int64_t FreeableBytes() const;
  // READY, not busy, not moving or promoting, no request in flight, and no
  // request holding it (HoldForRequest: one that got it from GetReady and
  // has not started yet, or has not let go of it): it may be demoted.
  bool Movable() const;
  // How many of HoldForRequest's references are alive now.
  int64_t request_holds() const { return request_holds_->load(); }
  // Begins a move of the READY model: returns it, to be moved unlocked.
  std::shared_ptr<ServedModel> StartMove();
  // The move ended (`moved`: it reached `tier`); `by_keep_alive` restarts
  // the keep_alive timer at `now`. The model counts `tier`'s bytes until it
  // is measured again.
  void FinishMove(bool moved, casting::WeightTier tier, absl::Time now,
                  bool by_keep_alive);
  // A request found the model below hot; no other promotion runs.
  void StartPromotion() {
    promoting_ = true;
    ++tier_changes_;
  }
  // The promotion got `bytes` (hot minus what its tier counts).
  void ReservePromotion(int64_t bytes) { promotion_reserved_bytes_ = bytes; }
  // `promoted`: the model is in `tier` now (hot, for a request); else the
  // reservation is dropped.
  void FinishPromotion(bool promoted,
                       casting::WeightTier tier = casting::WeightTier::kHot);

  // How fast the model wakes, from its timed promotions; kept across
  // reloads (the same checkpoint and config wake alike).
  const WakeRates& wake_rates() const { return wake_rates_; }
  // Notes the READY model's last promotion (ServedModel::last_promotion) in
  // wake_rates() unless it was noted already; returns it when it is new.
  std::optional<ServedModel::PromotionTiming> NoteLastPromotion();

  // Movable and not pinned.
  bool Evictable() const;
  // Unloads an Evictable model to stay within the memory budget: it loads
  // again on its next request. Returns the model, to be released unlocked.
  std::shared_ptr<ServedModel> Evict();

 private:
  ModelState state_ = ModelState::kUnavailable;
  std::string reason_;
  // Set while READY, and while a reload builds the new one beside it.
  std::shared_ptr<ServedModel> served_;
  uint64_t tier_changes_ = 0;
  // The references HoldForRequest handed out that are alive now (of any
  // version of the model: a request to the version a reload replaced keeps
  // the new one from moving until it ends).
  std::shared_ptr<std::atomic<int64_t>> request_holds_ =
      std::make_shared<std::atomic<int64_t>>(0);
  bool busy_ = false;
  bool loads_on_request_ = false;
  // Set while a load runs.
  std::shared_ptr<models::Cancellation> loading_;
  absl::Time last_used_ = absl::InfinitePast();
  bool claimed_on_request_ = false;
  bool load_retryable_ = false;
  absl::StatusCode failure_code_ = absl::StatusCode::kOk;
  absl::Time load_deadline_ = absl::InfinitePast();
  absl::Time memory_wait_cap_ = absl::InfiniteFuture();
  bool waiting_for_memory_ = false;
  // The running load's reservation.
  int64_t load_reserved_bytes_ = 0;
  // served_'s reservation and last measurement.
  int64_t reserved_bytes_ = 0;
  int64_t measured_bytes_ = 0;
  // The memory tier of served_ and the load's projection by tier.
  casting::WeightTier tier_ = casting::WeightTier::kHot;
  TierBytes tier_bytes_;
  TierSettings tier_settings_;
  std::optional<TierBytes> load_tier_bytes_;
  TierSettings load_tier_settings_;
  bool moving_ = false;
  bool promoting_ = false;
  // A move of served_ failed: no more demotions until it is promoted or
  // replaced (pressure would otherwise pick it again and again).
  bool demotion_failed_ = false;
  int64_t promotion_reserved_bytes_ = 0;
  WakeRates wake_rates_;
  // served_'s promotions noted so far (PromotionTiming::count).
  int64_t promotions_noted_ = 0;
  absl::Time last_moved_ = absl::InfinitePast();
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_LIFECYCLE_H_
