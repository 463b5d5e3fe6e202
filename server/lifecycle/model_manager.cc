#include "server/lifecycle/model_manager.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/lifecycle/lru_eviction_policy.h"
#include "server/lifecycle/model_catalog.h"
#include "server/log.h"
#include "server/metrics/lifecycle_metrics.h"

namespace castserve {
namespace {

using Config = absl::StatusOr<inference::ModelConfig>;

// glibc keeps freed blocks in its arenas; a model's tensors are large enough
// that an unloaded model would otherwise stay in the resident set. Hands free
// memory at the top of every arena, and whole free pages, back to the kernel.
void ReturnFreedMemoryToTheSystem() { malloc_trim(0); }

// How often GetReady re-checks the budget (measurements may pass the
// reservations: activations, a projection that fell short).
constexpr absl::Duration kBudgetCheckInterval = absl::Milliseconds(100);
// A load waiting for memory, and an unload waiting for the in-flight
// requests, wake at once on every change the manager makes (signalled on
// changed_); a model going idle (its last request done) or freed (its last
// reference gone) signals nothing, so they also look again this often —
// without measuring the models again (a measurement follows a change).
constexpr absl::Duration kIdleCheckInterval = absl::Milliseconds(5);
// How often the keep_alive thread looks again at a model with a request in
// flight (idleness counts from the last request's end).
constexpr absl::Duration kKeepAliveInFlightCheckInterval = absl::Seconds(1);

void LogScan(const std::string& path, const std::vector<ModelEntry>& models) {
  Log(LogLevel::kInfo, "model repository opened",
      {{"path", path}, {"models", models.size()}});
  for (const ModelEntry& model : models) {
    if (model.config.ok()) {
      Log(LogLevel::kInfo, "model found",
          {{"name", model.name}, {"directory", model.directory}});
    } else {
      Log(LogLevel::kWarning, "model unavailable",
          {{"name", model.name}, {"reason", model.config.status().message()}});
    }
  }
}

// "1 request in flight", "3 requests in flight".
std::string InFlight(int64_t requests) {
  return absl::StrCat(requests, requests == 1 ? " request" : " requests",
                      " in flight");
}

// Drives each model's ModelLifecycle: claims, loads through the factory,
// unloads, evicts under the LruEvictionPolicy, accounts the budget, and reads
// configs from the ModelCatalog. Load work GetReady starts runs on the
// executor.
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
  // Waits until `draining` has no request in flight, or max_unload_drain
  // has passed (then its requests keep it, counted, until they end).
  void DrainLocked(const std::string& name, const ServedModel& draining)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // Counts `model` (let go by `name`'s lifecycle, counting `bytes`) until
  // its last reference is gone.
  void CountUntilFreedLocked(const std::string& name,
                             const std::shared_ptr<ServedModel>& model,
                             int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  int active_loaders_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_budget_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Models let go of (evicted, unloaded, replaced) that may still be alive:
  // counted against the budget until their last reference is gone.
  struct Releasing {
    std::string name;
    std::weak_ptr<ServedModel> model;
    int64_t bytes = 0;
  };
  std::vector<Releasing> releasing_ ABSL_GUARDED_BY(mu_);
  // Started with the first READY model that has a finite keep_alive;
  // joined by the destructor.
  std::unique_ptr<platform::Thread> keep_alive_thread_ ABSL_GUARDED_BY(mu_);
};

ModelManagerImpl::~ModelManagerImpl() {
  // No one can use what a load still running would make.
  CancelAll("the model manager is shutting down");
  std::unique_ptr<platform::Thread> keep_alive;
  {
    absl::MutexLock lock(&mu_);
    while (active_loaders_ > 0) changed_.Wait(&mu_);
    keep_alive = std::move(keep_alive_thread_);
  }
  if (keep_alive != nullptr) keep_alive->Join();
}

void ModelManagerImpl::LoadStartupModels() {
  absl::StatusOr<std::vector<ModelEntry>> entries = catalog_.Scan();
  if (!entries.ok()) {
    Log(LogLevel::kError, "cannot scan the model repository",
        {{"error", entries.status().ToString()}});
    return;
  }
  LogScan(repository_.path(), *entries);
  for (ModelEntry& entry : *entries) {
    const bool startup =
        entry.config.ok() &&
        entry.config->load_policy() == inference::LOAD_POLICY_STARTUP;
    if (!startup) {
      NoteNotLoaded(entry.name, entry.config,
                    /*loads_on_request=*/entry.config.ok(),
                    /*only_if_new=*/false);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      ClaimLocked(entry.name, absl::InfiniteFuture());
    }
    // A failure is logged by FinishLoad and leaves the model UNAVAILABLE;
    // the others still load. The config is the one the scan parsed.
    RunClaimedLoad(entry.name, std::move(entry.config)).IgnoreError();
  }
}

void ModelManagerImpl::NoteNotLoaded(const std::string& name,
                                     const Config& config,
                                     bool loads_on_request, bool only_if_new) {
  const ModelStatus status = ModelCatalog::NotLoadedStatus(name, config);
  absl::MutexLock lock(&mu_);
  if (only_if_new && models_.count(name) > 0) return;  // Another was faster.
  if (models_[name].SetNotLoaded(status.reason, loads_on_request) &&
      !config.ok() && !only_if_new) {
    Log(LogLevel::kError, "model configuration is invalid",
        {{"model", name}, {"error", status.reason}});
  }
}

void ModelManagerImpl::ClaimLocked(const std::string& name,
                                   absl::Time wait_deadline, bool on_request) {
  while (models_[name].busy()) changed_.Wait(&mu_);
  models_[name].Claim(on_request, clock_.Now() + max_wait_for_memory_);
  models_[name].ExtendLoadDeadline(wait_deadline);
}

bool ModelManagerImpl::AwaitChangeLocked(absl::Time deadline) {
  const uint64_t seen = changes_;
  clock_.WaitWithDeadline(
      &changed_, &mu_, std::min(deadline, clock_.Now() + kIdleCheckInterval));
  return changes_ != seen;
}

void ModelManagerImpl::DrainLocked(const std::string& name,
                                   const ServedModel& draining) {
  const absl::Time deadline = clock_.Now() + max_unload_drain_;
  while (draining.pending_requests() > 0) {
    if (clock_.Now() >= deadline) {
      Log(LogLevel::kWarning,
          "unload stopped waiting for in-flight requests; they keep the "
          "model, counted against the budget, until they end",
          {{"model", name}, {"requests", draining.pending_requests()}});
      return;
    }
    AwaitChangeLocked(deadline);
  }
}

absl::Status ModelManagerImpl::Load(
    const std::string& name,
    std::optional<inference::ModelConfig> config_override) {
  if (absl::Status valid = ModelCatalog::ValidateName(name); !valid.ok()) {
    return valid;
  }
  if (!catalog_.Contains(name)) {
    return absl::NotFoundError(
        absl::StrCat("model ", name, " is not in the repository"));
  }
  {
    absl::MutexLock lock(&mu_);
    ClaimLocked(name, absl::InfiniteFuture());
  }
  return RunClaimedLoad(name,
                        catalog_.ConfigFor(name, std::move(config_override)));
}

absl::Status ModelManagerImpl::RunClaimedLoad(const std::string& name,
                                              Config config) {
  // The created model keeps it: it also stops the model's forwards.
  auto cancellation = std::make_shared<models::Cancellation>(cancel_all_);
  {
    absl::MutexLock lock(&mu_);
    models_[name].StartLoad(cancellation);
    NoteChangeLocked();
  }
  absl::Status status = config.status();
  if (status.ok()) status = AdmitLoad(name, *config, *cancellation);
  std::shared_ptr<ServedModel> created;
  if (status.ok()) {
    absl::StatusOr<std::shared_ptr<ServedModel>> made =
        CreateModel(name, *config, cancellation);
    status = made.status();
    if (made.ok()) created = *std::move(made);
  }
  FinishLoad(name, std::move(created), status);
  // An eager load is measured at once; a measure above the reservation
  // (buffers a projection does not see) makes room now.
  if (status.ok()) EnforceBudget(name);
  return status;
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelManagerImpl::CreateModel(
    const std::string& name, const inference::ModelConfig& config,
    std::shared_ptr<models::Cancellation> cancellation) {
  Log(LogLevel::kInfo, "loading model", {{"model", name}});
  const absl::Time load_start = clock_.Now();
  absl::StatusOr<std::shared_ptr<ServedModel>> made =
      factory_.Create(catalog_.DirectoryOf(name), config, cancellation);
  if (made.ok()) {
    LifecycleMetrics::Global().RecordLoad(name, clock_.Now() - load_start);
  }
  return made;
}

void ModelManagerImpl::FinishLoad(const std::string& name,
                                  std::shared_ptr<ServedModel> created,
                                  const absl::Status& status) {
  std::shared_ptr<ServedModel> replaced;  // Released after the lock.
  absl::MutexLock lock(&mu_);
  int64_t replaced_bytes = 0;
  const ModelLifecycle::LoadOutcome outcome = models_[name].FinishLoad(
      std::move(created), status, clock_.Now(), &replaced, &replaced_bytes);
  if (replaced != nullptr) {
    CountUntilFreedLocked(name, replaced, replaced_bytes);
  }
  NoteAccountingLocked();
  switch (outcome) {
    case ModelLifecycle::LoadOutcome::kReady:
      Log(LogLevel::kInfo, "model ready", {{"model", name}});
      LifecycleMetrics::Global().SetTier(name, casting::WeightTier::kHot);
      MaybeStartKeepAliveLocked(models_[name]);
      break;
    case ModelLifecycle::LoadOutcome::kKeptLoaded:
      Log(LogLevel::kError, "reload failed; the loaded model keeps serving",
          {{"model", name}, {"error", status.ToString()}});
      break;
    case ModelLifecycle::LoadOutcome::kFailed:
      Log(LogLevel::kError, "model failed to load",
          {{"model", name}, {"error", status.ToString()}});
      break;
  }
  NoteChangeLocked();
}

void ModelManagerImpl::StartLoadOnRequestLocked(const std::string& name,
                                                absl::Time deadline) {
  ClaimLocked(name, deadline, /*on_request=*/true);
  ++active_loaders_;
  executor_.Schedule([this, name] {
    // FinishLoad logs a failure.
    RunClaimedLoad(name, catalog_.ConfigFor(name, std::nullopt)).IgnoreError();
    absl::MutexLock lock(&mu_);
    --active_loaders_;
    NoteChangeLocked();
  });
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelManagerImpl::GetReady(
    const std::string& name, const std::string& version, absl::Time deadline) {
  if (absl::Status found = CheckModelVersion(name, version); !found.ok()) {
    return found;
  }
  if (!ModelCatalog::ValidateName(name).ok()) {
    return absl::NotFoundError(
        absl::StrCat("unknown model '", Abbreviated(name), "'"));
  }
  bool known;
  {
    absl::MutexLock lock(&mu_);
    known = models_.count(name) > 0;
  }
  if (!known) {
    if (!catalog_.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    const Config config = catalog_.ConfigFor(name, std::nullopt);
    NoteNotLoaded(name, config, ModelCatalog::LoadsOnFirstRequest(config),
                  /*only_if_new=*/true);
  }
  const absl::Time start = clock_.Now();
  std::optional<Promotion> promotion;
  absl::StatusOr<std::shared_ptr<ServedModel>> ready =
      WaitUntilReady(name, deadline, &promotion);
  if (ready.ok() && promotion.has_value()) {
    const casting::WeightTier found = promotion->from;
    if (absl::Status promoted = Promote(name, *std::move(promotion), deadline);
        !promoted.ok()) {
      return promoted;
    }
    LifecycleMetrics::Global().RecordWake(found, clock_.Now() - start);
  }
  if (ready.ok()) MaybeEnforceBudget(name);
  return ready;
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelManagerImpl::WaitUntilReady(
    const std::string& name, absl::Time deadline,
    std::optional<Promotion>* promotion) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    ModelLifecycle& model = models_[name];
    const bool expired = clock_.Now() >= deadline;
    std::shared_ptr<ServedModel> ready = model.ready();
    // A move or promotion of this model ends before its request runs: the
    // request counts, and runs, on the tier it will find.
    if (ready != nullptr && (model.moving() || model.promoting())) {
      if (expired) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", name,
            " did not finish its memory tier move before the deadline"));
      }
      clock_.WaitWithDeadline(&changed_, &mu_, deadline);
      continue;
    }
    if (ready != nullptr) {
      model.MarkUsed(clock_.Now());
      if (model.tier() != casting::WeightTier::kHot) {
        model.StartPromotion();
        *promotion = Promotion{ready, model.tier(), casting::WeightTier::kHot,
                               "request"};
      }
      return ready;
    }
    if (!model.busy() && model.loads_on_request() && !expired) {
      StartLoadOnRequestLocked(name, deadline);
    }
    if (!model.busy()) {
      // A load that got no memory says so with its code, as the load did.
      const absl::StatusCode code =
          model.failure_code() == absl::StatusCode::kResourceExhausted
              ? absl::StatusCode::kResourceExhausted
              : absl::StatusCode::kUnavailable;
      return absl::Status(
          code,
          absl::StrCat("model ", name, " is not ready: ", model.reason()));
    }
    if (expired && model.waiting_for_memory()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("memory budget exceeded: model ", name,
                       " did not get its memory before the deadline (",
                       model.reason(), ")"));
    }
    if (expired) {
      return absl::DeadlineExceededError(absl::StrCat(
          "model ", name, " did not become ready before the deadline (",
          model.reason(), ")"));
    }
    // The load may wait for memory as long as a request waits for it, up to
    // the cap its claim set.
    model.ExtendLoadDeadline(deadline);
    clock_.WaitWithDeadline(&changed_, &mu_, deadline);
  }
}

absl::Status ModelManagerImpl::Unload(const std::string& name) {
  if (absl::Status valid = ModelCatalog::ValidateName(name); !valid.ok()) {
    return valid;
  }
  std::shared_ptr<ServedModel> draining;
  {
    absl::MutexLock lock(&mu_);
    if (models_.count(name) == 0 && !catalog_.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    if (models_[name].CancelLoad(
            "the model was unloaded while it was loading")) {
      Log(LogLevel::kInfo, "cancelling the load of an unloaded model",
          {{"model", name}});
      NoteChangeLocked();  // A load waiting for memory stops.
    }
    ClaimLocked(name, absl::InfinitePast());
    const int64_t draining_bytes = models_[name].served_bytes();
    draining = models_[name].StartUnload();
    if (draining != nullptr) {
      CountUntilFreedLocked(name, draining, draining_bytes);
    }
    NoteAccountingLocked();
    NoteChangeLocked();
  }
  if (draining != nullptr) {
    Log(LogLevel::kInfo, "unloading model", {{"model", name}});
    {
      absl::MutexLock lock(&mu_);
      DrainLocked(name, *draining);
    }
    // The model dies with the last reference: ours, once no request holds
    // one (a request stops counting as pending only after its callback let
    // go of the model). Unlocked: its destructor may take a while.
    draining.reset();
    ReturnFreedMemoryToTheSystem();
  }
  absl::MutexLock lock(&mu_);
  models_[name].FinishUnload();
  NoteChangeLocked();
  return absl::OkStatus();
}

void ModelManagerImpl::CancelAll(const std::string& reason) {
  cancel_all_->Cancel(reason);
  absl::MutexLock lock(&mu_);
  NoteChangeLocked();  // Loads waiting for memory stop.
}

std::vector<ModelStatus> ModelManagerImpl::Index() {
  absl::StatusOr<std::vector<ModelEntry>> entries = catalog_.Scan();
  std::map<std::string, ModelStatus> by_name;
  if (entries.ok()) {
    for (const ModelEntry& entry : *entries) {
      by_name[entry.name] =
          ModelCatalog::NotLoadedStatus(entry.name, entry.config);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, model] : models_) {
      by_name[name] = model.StatusOf(name);
    }
  }
  std::vector<ModelStatus> index;
  index.reserve(by_name.size());
  for (auto& [name, status] : by_name) index.push_back(std::move(status));
  return index;
}

absl::StatusOr<ModelStatus> ModelManagerImpl::Status(const std::string& name) {
  if (ModelCatalog::ValidateName(name).ok()) {
    {
      absl::MutexLock lock(&mu_);
      auto it = models_.find(name);
      if (it != models_.end()) return it->second.StatusOf(name);
    }
    if (catalog_.Contains(name)) {
      return ModelCatalog::NotLoadedStatus(
          name, catalog_.ConfigFor(name, std::nullopt));
    }
  }
  return absl::NotFoundError(absl::StrCat("unknown model ", Abbreviated(name)));
}

std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
ModelManagerImpl::ReadyModels() {
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>> ready;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, model] : models_) {
    if (std::shared_ptr<ServedModel> served = model.ready()) {
      ready.emplace_back(name, std::move(served));
    }
  }
  return ready;
}

absl::Status ModelManagerImpl::MoveTo(const std::string& name,
                                      casting::WeightTier tier) {
  if (absl::Status valid = ModelCatalog::ValidateName(name); !valid.ok()) {
    return valid;
  }
  if (!memory_tiers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot move model ", name,
        " between memory tiers: memory tiers are off (--memory-tiers=false)"));
  }
  std::optional<Move> move;
  std::optional<Promotion> promotion;
  const absl::Time deadline = clock_.Now() + max_wait_for_memory_;
  {
    absl::MutexLock lock(&mu_);
    if (models_.count(name) == 0 && !catalog_.Contains(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    ModelLifecycle& model = models_[name];
    // One move or promotion of a model at a time.
    while (model.ready() != nullptr &&
           (model.moving() || model.promoting() || model.busy())) {
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", name, " is still moving, loading or being promoted"));
      }
      AwaitChangeLocked(deadline);
    }
    std::shared_ptr<ServedModel> ready = model.ready();
    if (ready == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("model ", name, " is not READY: ", model.reason()));
    }
    const TierSettings& settings = model.tier_settings();
    if (settings.pinned && Colder(tier, settings.floor)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model ", name, " is pinned at tier ",
          casting::WeightTierName(settings.floor),
          " (tiers.pin): it cannot move to ", casting::WeightTierName(tier)));
    }
    const casting::WeightTier target = EffectiveTier(model.tier_bytes(), tier);
    if (target == model.tier()) return absl::OkStatus();
    if (Colder(target, model.tier())) {
      move = StartMoveLocked(name, target, "api");
    } else {
      model.StartPromotion();
      promotion = Promotion{ready, model.tier(), target, "api"};
    }
  }
  if (move.has_value()) return RunMove(*std::move(move));
  return Promote(name, *std::move(promotion), deadline);
}

ModelManagerImpl::Move ModelManagerImpl::StartMoveLocked(
    const std::string& name, casting::WeightTier to, const char* cause) {
  ModelLifecycle& model = models_[name];
  const casting::WeightTier from = model.tier();
  return Move{name, model.StartMove(), from, to, cause};
}

absl::Status ModelManagerImpl::RunMove(Move move) {
  // Bounded: Demote waits only for the forwards running now.
  absl::Status moved = move.model->MoveTo(move.to);
  move.model.reset();
  if (moved.ok()) ReturnFreedMemoryToTheSystem();
  absl::MutexLock lock(&mu_);
  const bool by_keep_alive = std::string(move.cause) == "keep_alive";
  models_[move.name].FinishMove(moved.ok(), move.to, clock_.Now(),
                                by_keep_alive);
  if (moved.ok()) {
    Log(LogLevel::kInfo, "moved model to a colder memory tier",
        {{"model", move.name},
         {"from", std::string(casting::WeightTierName(move.from))},
         {"to", std::string(casting::WeightTierName(move.to))},
         {"cause", move.cause}});
    LifecycleMetrics::Global().RecordTierMove(move.name, move.from, move.to,
                                              move.cause);
  } else {
    Log(LogLevel::kWarning, "memory tier move failed",
        {{"model", move.name}, {"error", moved.ToString()}});
  }
  NoteAccountingLocked();
  NoteChangeLocked();
  return moved;
}

std::optional<ModelManagerImpl::Move> ModelManagerImpl::StartPressureMoveLocked(
    const std::string& keep, int64_t bytes_to_free) {
  if (!memory_tiers_) return std::nullopt;
  std::vector<TierCandidate> candidates;
  for (const auto& [name, model] : models_) {
    if (model.ready() == nullptr) continue;
    TierCandidate candidate{name,
                            model.last_used(),
                            model.tier_settings().priority,
                            model.Movable(),
                            model.tier(),
                            model.NextDemotion()};
    candidate.freeable_bytes = model.FreeableBytes();
    candidates.push_back(std::move(candidate));
  }
  if (FreeableBytes(candidates, keep) < bytes_to_free) return std::nullopt;
  const std::optional<std::string> victim = PickDemotion(candidates, keep);
  if (!victim.has_value()) return std::nullopt;
  return StartMoveLocked(*victim, *models_[*victim].NextDemotion(), "pressure");
}

absl::Status ModelManagerImpl::Promote(const std::string& name,
                                       Promotion promotion,
                                       absl::Time deadline) {
  int64_t bytes;
  {
    absl::MutexLock lock(&mu_);
    const TierBytes& tiers = models_[name].tier_bytes();
    bytes =
        std::max<int64_t>(tiers.at(promotion.to) - tiers.at(promotion.from), 0);
  }
  absl::Status reserved = absl::OkStatus();
  if (eviction_.has_budget()) {
    reserved = ReserveMemory(name, bytes, *cancel_all_, deadline);
  }
  // Marks it: the next forward builds back what the tier keeps.
  if (reserved.ok()) reserved = promotion.model->MoveTo(promotion.to);
  promotion.model.reset();
  absl::MutexLock lock(&mu_);
  models_[name].FinishPromotion(reserved.ok(), promotion.to);
  if (reserved.ok()) {
    LifecycleMetrics::Global().RecordTierMove(name, promotion.from,
                                              promotion.to, promotion.cause);
  }
  NoteAccountingLocked();
  NoteChangeLocked();
  return reserved;
}

void ModelManagerImpl::MaybeStartKeepAliveLocked(const ModelLifecycle& model) {
  if (!memory_tiers_ || keep_alive_thread_ != nullptr ||
      model.tier_settings().keep_alive == absl::InfiniteDuration()) {
    return;
  }
  keep_alive_thread_ = executor_.StartThread([this] { RunKeepAlive(); });
}

void ModelManagerImpl::RunKeepAlive() {
  for (;;) {
    std::optional<Move> move;
    {
      absl::MutexLock lock(&mu_);
      if (cancel_all_->cancelled()) return;
      absl::Time next_check = absl::InfiniteFuture();
      move = StartKeepAliveMoveLocked(&next_check);
      if (!move.has_value()) {
        clock_.WaitWithDeadline(&changed_, &mu_, next_check);
        continue;
      }
    }
    RunMove(*std::move(move)).IgnoreError();
  }
}

std::optional<ModelManagerImpl::Move>
ModelManagerImpl::StartKeepAliveMoveLocked(absl::Time* next_check) {
  const absl::Time now = clock_.Now();
  for (auto& [name, model] : models_) {
    // Not a copy of the pointer: Movable counts the references.
    const ServedModel* ready = model.ready().get();
    const absl::Duration keep_alive = model.tier_settings().keep_alive;
    if (ready == nullptr || keep_alive == absl::InfiniteDuration() ||
        !model.NextDemotion().has_value()) {
      continue;
    }
    // Idleness counts from the end of the last request: one in flight
    // keeps the model in use.
    const bool in_flight = ready->pending_requests() > 0;
    if (in_flight) model.MarkUsed(now);
    const absl::Time due = model.idle_since() + keep_alive;
    if (due > now) {
      *next_check = std::min(
          *next_check,
          in_flight ? std::min(due, now + kKeepAliveInFlightCheckInterval)
                    : due);
      continue;
    }
    if (model.Movable()) {
      return StartMoveLocked(name, *model.NextDemotion(), "keep_alive");
    }
    // Held for a moment (a request about to run, a measurement).
    *next_check = std::min(*next_check, now + kIdleCheckInterval);
  }
  return std::nullopt;
}

absl::Status ModelManagerImpl::AdmitLoad(
    const std::string& name, const inference::ModelConfig& config,
    const models::Cancellation& cancellation) {
  if (!eviction_.has_budget() && !memory_tiers_) return absl::OkStatus();
  absl::StatusOr<TierBytes> tiers;
  if (memory_tiers_) {
    tiers = factory_.ProjectedTierBytes(catalog_.DirectoryOf(name), config);
  } else {
    absl::StatusOr<int64_t> bytes =
        factory_.ProjectedBytes(catalog_.DirectoryOf(name), config);
    if (bytes.ok())
      tiers = TierBytes::Flat(*bytes);
    else
      tiers = bytes.status();
  }
  if (!tiers.ok()) return tiers.status();
  {
    absl::MutexLock lock(&mu_);
    models_[name].SetLoadTiers(
        memory_tiers_ ? *tiers : TierBytes::Flat(tiers->hot),
        TierSettingsOf(config, default_keep_alive_));
  }
  if (!eviction_.has_budget()) return absl::OkStatus();
  const int64_t projected = tiers->hot;
  // A model that cannot fit even alone must not cost the others their
  // place, nor wait: fail before evicting anything. A reload cannot evict
  // the version it replaces, which counts until the swap.
  int64_t kept_bytes;
  {
    absl::MutexLock lock(&mu_);
    kept_bytes = models_[name].served_bytes();
  }
  if (absl::Status alone = eviction_.CheckAlone(name, projected, kept_bytes);
      !alone.ok()) {
    return alone;
  }
  return ReserveMemory(name, projected, cancellation);
}

absl::Status ModelManagerImpl::ReserveMemory(
    const std::string& name, int64_t bytes,
    const models::Cancellation& cancellation,
    std::optional<absl::Time> promotion_deadline) {
  const bool promotion = promotion_deadline.has_value();
  bool measure = true;
  for (;;) {
    if (measure) MeasureModels();
    measure = true;
    std::vector<std::shared_ptr<ServedModel>> evicted;
    std::optional<Move> demotion;
    {
      absl::MutexLock lock(&mu_);
      if (cancellation.cancelled()) {
        return absl::CancelledError(cancellation.reason());
      }
      ModelLifecycle& model = models_[name];
      const int64_t held_bytes = AccountedBytesLocked();
      if (eviction_.Fits(held_bytes, bytes)) {
        if (promotion) {
          model.ReservePromotion(bytes);
        } else {
          model.ReserveForLoad(bytes);
          model.SetWaitingForMemory("");
        }
        NoteAccountingLocked();
        NoteChangeLocked();
        return absl::OkStatus();
      }
      const int64_t bytes_to_free =
          held_bytes + bytes - eviction_.memory_budget_bytes();
      demotion = StartPressureMoveLocked(name, bytes_to_free);
      if (!demotion.has_value()) evicted = EvictLocked(name, bytes_to_free);
      if (!demotion.has_value() && evicted.empty()) {
        const std::vector<BudgetHolder> holders = HoldersLocked();
        const absl::Time deadline =
            promotion ? *promotion_deadline : model.load_deadline();
        if (clock_.Now() >= deadline) {
          if (!promotion) model.MarkLoadRetryable();
          return eviction_.NoRoomBeforeDeadline(name, bytes, held_bytes,
                                                holders);
        }
        if (promotion) {
          measure = AwaitChangeLocked(deadline);
          continue;
        }
        if (!model.waiting_for_memory()) {
          Log(LogLevel::kInfo, "load waits for memory",
              {{"model", name}, {"bytes", bytes}, {"held_bytes", held_bytes}});
        }
        model.SetWaitingForMemory(
            eviction_.WaitingReason(name, bytes, held_bytes, holders));
        measure = AwaitChangeLocked(deadline);
        continue;
      }
    }
    if (demotion.has_value()) {
      RunMove(*std::move(demotion)).IgnoreError();  // RunMove logs it.
      continue;
    }
    evicted.clear();  // Frees the evicted models, unlocked.
    ReturnFreedMemoryToTheSystem();
  }
}

void ModelManagerImpl::MeasureModels() {
  const auto ready = ReadyModels();
  std::vector<int64_t> measured_bytes;
  measured_bytes.reserve(ready.size());
  for (const auto& [name, model] : ready) {
    measured_bytes.push_back(model->measured_bytes());
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < ready.size(); ++i) {
    models_[ready[i].first].SetMeasured(ready[i].second.get(),
                                        measured_bytes[i]);
  }
  NoteAccountingLocked();
}

int64_t ModelManagerImpl::AccountedBytesLocked() {
  releasing_.erase(std::remove_if(releasing_.begin(), releasing_.end(),
                                  [](const Releasing& releasing) {
                                    return releasing.model.expired();
                                  }),
                   releasing_.end());
  int64_t bytes = 0;
  for (const auto& [name, model] : models_) bytes += model.accounted_bytes();
  for (const Releasing& releasing : releasing_) bytes += releasing.bytes;
  return bytes;
}

void ModelManagerImpl::NoteAccountingLocked() {
  if (on_accounted_bytes_) on_accounted_bytes_(AccountedBytesLocked());
}

std::vector<BudgetHolder> ModelManagerImpl::HoldersLocked() {
  std::vector<BudgetHolder> holders;
  for (const auto& [name, model] : models_) {
    const int64_t bytes = model.accounted_bytes();
    if (bytes == 0) continue;
    std::string state = "idle";
    if (model.busy()) {
      state = model.ready() != nullptr ? "reloading" : "loading";
    } else if (const std::shared_ptr<ServedModel> ready = model.ready()) {
      if (ready->pending_requests() > 0) {
        state = InFlight(ready->pending_requests());
      }
      if (model.tier() != casting::WeightTier::kHot) {
        absl::StrAppend(&state, ", ", casting::WeightTierName(model.tier()));
      }
      if (model.tier_settings().pinned) {
        absl::StrAppend(&state, ", pinned ",
                        casting::WeightTierName(model.tier_settings().floor));
      }
    }
    holders.push_back({name, bytes, std::move(state)});
  }
  for (const Releasing& releasing : releasing_) {
    holders.push_back(
        {releasing.name, releasing.bytes, "unloaded, still in use"});
  }
  return holders;
}

void ModelManagerImpl::CountUntilFreedLocked(
    const std::string& name, const std::shared_ptr<ServedModel>& model,
    int64_t bytes) {
  if (bytes > 0) releasing_.push_back({name, model, bytes});
}

std::vector<std::shared_ptr<ServedModel>> ModelManagerImpl::EvictLocked(
    const std::string& keep, int64_t bytes_to_free) {
  std::vector<EvictionCandidate> candidates;
  candidates.reserve(models_.size());
  for (const auto& [name, model] : models_) {
    candidates.push_back({name, model.last_used(), model.Evictable(),
                          model.served_bytes(),
                          model.tier_settings().priority});
  }
  std::vector<std::shared_ptr<ServedModel>> evicted;
  for (const std::string& victim :
       eviction_.PickVictims(candidates, keep, bytes_to_free)) {
    Log(LogLevel::kInfo, "evicted model to stay within the memory budget",
        {{"model", victim}, {"for", keep}});
    LifecycleMetrics::Global().RecordEviction(victim);
    ModelLifecycle& model = models_[victim];
    const int64_t bytes = model.served_bytes();
    evicted.push_back(model.Evict());
    CountUntilFreedLocked(victim, evicted.back(), bytes);
  }
  if (!evicted.empty()) {
    NoteAccountingLocked();
    NoteChangeLocked();
  }
  return evicted;
}

void ModelManagerImpl::EnforceBudget(const std::string& keep) {
  if (!eviction_.has_budget()) return;
  MeasureModels();
  std::vector<std::shared_ptr<ServedModel>> evicted;
  for (;;) {
    std::optional<Move> demotion;
    {
      absl::MutexLock lock(&mu_);
      const int64_t held_bytes = AccountedBytesLocked();
      if (eviction_.Fits(held_bytes, 0)) return;
      demotion = StartPressureMoveLocked(
          keep, held_bytes - eviction_.memory_budget_bytes());
    }
    if (!demotion.has_value()) break;
    RunMove(*std::move(demotion)).IgnoreError();
    MeasureModels();
  }
  {
    absl::MutexLock lock(&mu_);
    const int64_t held_bytes = AccountedBytesLocked();
    if (eviction_.Fits(held_bytes, 0)) return;
    evicted = EvictLocked(keep, held_bytes - eviction_.memory_budget_bytes());
    if (evicted.empty()) {
      Log(LogLevel::kWarning,
          "over the memory budget: the models measure more than reserved",
          {{"model", keep},
           {"held_bytes", held_bytes},
           {"budget_bytes", eviction_.memory_budget_bytes()}});
    }
  }
  if (evicted.empty()) return;
  evicted.clear();  // Frees the evicted models, unlocked.
  ReturnFreedMemoryToTheSystem();
}

void ModelManagerImpl::MaybeEnforceBudget(const std::string& keep) {
  if (!eviction_.has_budget()) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    if (now - last_budget_check_ < kBudgetCheckInterval) return;
    last_budget_check_ = now;
  }
  EnforceBudget(keep);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelManager>> ModelManager::Create(
    ModelManagerOptions options) {
  if (options.repository == nullptr || options.factory == nullptr) {
    return absl::InvalidArgumentError(
        "ModelManager needs a repository and a factory");
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget ", options.memory_budget_bytes, " bytes is negative"));
  }
  return std::unique_ptr<ModelManager>(new ModelManagerImpl(options));
}

}  // namespace castserve
