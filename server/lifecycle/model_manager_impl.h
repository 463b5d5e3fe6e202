// The ModelManager's implementation, shared by its two files:
// model_manager.cc (loads, unloads, the budget) and model_manager_tiers.cc
// (memory tier moves, promotions, keep_alive). Internal to
// //server/lifecycle:model_manager.
#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_IMPL_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_IMPL_H_

#include <malloc.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/lifecycle/freed_signal.h"
#include "server/lifecycle/lru_eviction_policy.h"
#include "server/lifecycle/model_catalog.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/tier_policy.h"
#include "server/log.h"
#include "server/metrics/lifecycle_metrics.h"

namespace castserve::lifecycle_internal {

using Config = absl::StatusOr<inference::ModelConfig>;

// glibc keeps freed blocks in its arenas; a model's tensors are large enough
// that an unloaded model would otherwise stay in the resident set. Hands free
// memory at the top of every arena, and whole free pages, back to the kernel.
inline void ReturnFreedMemoryToTheSystem() { malloc_trim(0); }

// What bytes still counted after their model let go of them are (the
// budget's messages).
inline constexpr char kStillInUse[] = "unloaded, still in use";
inline constexpr char kBeingFreed[] = "demoted, being freed";

// How often GetReady re-checks the budget (measurements may pass the
// reservations: activations, a projection that fell short).
inline constexpr absl::Duration kBudgetCheckInterval = absl::Milliseconds(100);
// A load waiting for memory, and an unload waiting for the in-flight
// requests, wake at once on every change the manager makes (signalled on
// changed_); a model going idle (its last request done) or freed (its last
// reference gone) signals nothing, so they also look again this often —
// without measuring the models again (a measurement follows a change).
inline constexpr absl::Duration kIdleCheckInterval = absl::Milliseconds(5);
// How often the keep_alive thread looks again at a model with a request in
// flight (idleness counts from the last request's end).
inline constexpr absl::Duration kKeepAliveInFlightCheckInterval =
    absl::Seconds(1);

// Drives each model's ModelLifecycle: claims, loads through the factory,
// unloads, moves models between memory tiers (tier_policy.h), evicts under
// the LruEvictionPolicy, accounts the budget, and reads configs from the
// ModelCatalog. Load work GetReady starts runs on the executor; keep_alive
// on a thread of the executor's.
class ModelManagerImpl final : public ModelManager {
 public:
  explicit ModelManagerImpl(ModelManagerOptions options)
      : repository_(*options.repository),
        catalog_(options.repository),
        factory_(*options.factory),
        executor_(options.executor != nullptr ? *options.executor
                                              : platform::Executor::Default()),
        clock_(options.clock != nullptr ? *options.clock
                                        : platform::Clock::Real()),
        eviction_(options.memory_budget_bytes),
        memory_tiers_(options.memory_tiers),
        default_keep_alive_(options.keep_alive),
        max_wait_for_memory_(options.max_wait_for_memory),
        max_unload_drain_(options.max_unload_drain),
        on_accounted_bytes_(std::move(options.on_accounted_bytes)),
        cancel_all_(std::make_shared<models::Cancellation>(options.stop)) {}
  ~ModelManagerImpl() override;

  void LoadStartupModels() override;
  absl::StatusOr<std::shared_ptr<ServedModel>> GetReady(
      const std::string& name, const std::string& version,
      absl::Time deadline) override;
  absl::Status Load(
      const std::string& name,
      std::optional<inference::ModelConfig> config_override) override;
  absl::Status Unload(const std::string& name) override;
  void CancelAll(const std::string& reason) override;
  std::vector<ModelStatus> Index() override;
  absl::StatusOr<ModelStatus> Status(const std::string& name) override;
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
  ReadyModels() override;
  absl::Status MoveTo(const std::string& name,
                      casting::WeightTier tier) override;

 private:
  // A move the caller started (ModelLifecycle::StartMove) under the lock.
  struct Move {
    std::string name;
    std::shared_ptr<ServedModel> model;
    casting::WeightTier from = casting::WeightTier::kHot;
    casting::WeightTier to = casting::WeightTier::kHot;
    const char* cause = "";  // castserve_tier_moves_total's cause label.
  };
  // A promotion the caller started (ModelLifecycle::StartPromotion).
  struct Promotion {
    std::shared_ptr<ServedModel> model;
    casting::WeightTier from = casting::WeightTier::kHot;
    casting::WeightTier to = casting::WeightTier::kHot;
    const char* cause = "";
  };
  // Waits until no load or unload of `name` runs, then claims it. A load
  // of the claim may wait for memory until `wait_deadline` (its caller's),
  // and at most max_wait_for_memory after the claim: the cap is computed
  // here, once per load, whoever claims.
  void ClaimLocked(const std::string& name, absl::Time wait_deadline,
                   bool on_request = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Signals changed_ for every waiter, counting the change.
  void NoteChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++changes_;
    changed_.SignalAll();
  }
  // Waits (mu_ held) for a change or kIdleCheckInterval, until `deadline`
  // at the latest; true when a change was signalled meanwhile.
  bool AwaitChangeLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `draining` has no request in flight, or `deadline` (the
  // unload's start plus max_unload_drain) has passed (then its requests
  // keep it, counted, until they end).
  void DrainLocked(const std::string& name, const ServedModel& draining,
                   absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads `name`, claimed by the caller, with `config` (parsed once, by
  // the caller), and releases the claim.
  absl::Status RunClaimedLoad(const std::string& name, Config config);
  absl::StatusOr<std::shared_ptr<ServedModel>> CreateModel(
      const std::string& name, const inference::ModelConfig& config,
      std::shared_ptr<models::Cancellation> cancellation);
  void FinishLoad(const std::string& name, std::shared_ptr<ServedModel> created,
                  const absl::Status& status);
  void StartLoadOnRequestLocked(const std::string& name, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Describes `name`, not loaded, from its config (at startup, also logs a
  // bad one); `only_if_new`: unless the manager knows it already.
  void NoteNotLoaded(const std::string& name, const Config& config,
                     bool loads_on_request, bool only_if_new)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The READY model; when it is below hot (and no promotion of it runs),
  // `*promotion` is set: the caller promotes it (Promote) before serving.
  absl::StatusOr<std::shared_ptr<ServedModel>> WaitUntilReady(
      const std::string& name, absl::Time deadline,
      std::optional<Promotion>* promotion) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Memory tiers (see model_manager.h) ---

  // Starts the move of `name` to `to` (its lifecycle marked moving).
  Move StartMoveLocked(const std::string& name, casting::WeightTier to,
                       const char* cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `move` unlocked, then ends it: the model counts its new tier.
  absl::Status RunMove(Move move) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the demotion pressure takes next to free `bytes_to_free` for
  // `keep`: none when no demotion is left, or when demotions and unloads
  // together could not free that much (waiting may then make room).
  std::optional<Move> StartPressureMoveLocked(const std::string& keep,
                                              int64_t bytes_to_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes the READY `model`'s last promotion, if it was not noted yet, in
  // its wake rates and all_wake_rates_, and logs it. Before each pressure
  // decision (for every model) and each promotion (for that one).
  void NoteWakeRateLocked(const std::string& name, ModelLifecycle& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves the bytes back up to `promotion.to` for `name` (as a load's
  // reservation, until `deadline`), then marks the model there.
  absl::Status Promote(const std::string& name, Promotion promotion,
                       absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the keep_alive thread once a READY model has a finite
  // keep_alive.
  void MaybeStartKeepAliveLocked(const ModelLifecycle& model)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keep_alive thread: demotes models idle for their keep_alive, one
  // tier at a time, until CancelAll.
  void RunKeepAlive() ABSL_LOCKS_EXCLUDED(mu_);
  // The keep_alive demotion due now, if any; else when to look again.
  std::optional<Move> StartKeepAliveMoveLocked(absl::Time* next_check)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- The memory budget (see model_manager.h) ---

  // Projects the configured footprint of the claimed load of `name` and
  // reserves it (ReserveMemory). OK at once without a budget.
  absl::Status AdmitLoad(const std::string& name,
                         const inference::ModelConfig& config,
                         const models::Cancellation& cancellation)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Reserves `bytes` for the claimed load of `name`, or, with
  // `promotion_deadline`, for its promotion: demotes, then evicts, idle
  // models when that makes room, else waits for busy ones until the load's
  // deadline (the promotion's).
  absl::Status ReserveMemory(const std::string& name, int64_t bytes,
                             const models::Cancellation& cancellation,
                             std::optional<absl::Time> promotion_deadline =
                                 std::nullopt) ABSL_LOCKS_EXCLUDED(mu_);
  // Measures the READY models (unlocked: a footprint waits on the weights'
  // locks) and records the measurements.
  void MeasureModels() ABSL_LOCKS_EXCLUDED(mu_);
  // What is counted against the budget now (drops the freed models).
  int64_t AccountedBytesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteAccountingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Who holds the counted bytes, for messages.
  std::vector<BudgetHolder> HoldersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `bytes` of `name` until `owner` is freed (WatchFreed: its
  // destructor returned, for a pointer SignalWhenFreed made), once the last
  // reference to it is gone:
  // a model its lifecycle let go of ("unloaded, still in use"), or what a
  // move down took out of it ("demoted, being freed"); `state` says which.
  void CountUntilFreedLocked(const std::string& name,
                             const std::shared_ptr<const void>& owner,
                             int64_t bytes, const char* state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts idle models other than `keep`, least recently used first, when
  // together they free `bytes_to_free`. The evicted models, to be released
  // unlocked; none if they could not free that much.
  std::vector<std::shared_ptr<ServedModel>> EvictLocked(const std::string& keep,
                                                        int64_t bytes_to_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Measures, and evicts idle models other than `keep` if the measurements
  // took the count over the budget.
  void EnforceBudget(const std::string& keep) ABSL_LOCKS_EXCLUDED(mu_);
  // EnforceBudget, at most every kBudgetCheckInterval.
  void MaybeEnforceBudget(const std::string& keep) ABSL_LOCKS_EXCLUDED(mu_);

  const ModelRepository& repository_;
  const ModelCatalog catalog_;
  ServedModelFactory& factory_;
  platform::Executor& executor_;
  platform::Clock& clock_;
  const LruEvictionPolicy eviction_;
  const bool memory_tiers_;
  const absl::Duration default_keep_alive_;
  const absl::Duration max_wait_for_memory_;
  const absl::Duration max_unload_drain_;
  const std::function<void(int64_t)> on_accounted_bytes_;
  // The parent of every load's cancellation.
  const std::shared_ptr<models::Cancellation> cancel_all_;

  absl::Mutex mu_;
  // Signalled (NoteChangeLocked) on every state change of any model, every
  // eviction, cancellation, and when a loader ends.
  absl::CondVar changed_;
  // How many changes were signalled.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, ModelLifecycle> models_ ABSL_GUARDED_BY(mu_);
  // Every model's timed promotions: a model not promoted yet is expected to
  // wake at their rates (ExpectedWakeRate).
  WakeRates all_wake_rates_ ABSL_GUARDED_BY(mu_);
  int active_loaders_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_budget_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Models let go of (evicted, unloaded, replaced) that may still be alive,
  // and memory moves down took out of models and are still freeing: counted
  // against the budget until their last reference is gone.
  struct Releasing {
    std::string name;
    std::weak_ptr<const void> owner;
    int64_t bytes = 0;
    const char* state = "";
  };
  std::vector<Releasing> releasing_ ABSL_GUARDED_BY(mu_);
  // Started with the first READY model that has a finite keep_alive;
  // joined by the destructor.
  std::unique_ptr<platform::Thread> keep_alive_thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::lifecycle_internal

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_IMPL_H_
