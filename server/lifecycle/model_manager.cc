#include "server/lifecycle/model_manager.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/lifecycle/model_manager_impl.h"
#include "server/log.h"
#include "server/metrics/lifecycle_metrics.h"

namespace castserve {
namespace lifecycle_internal {
namespace {

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

}  // namespace

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
                                   const ServedModel& draining,
                                   absl::Time deadline) {
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
  // Every reference to the model comes from this pointer: the budget counts
  // it, once let go of, until its destructor returned (CountUntilFreed).
  created = SignalWhenFreed(std::move(created));
  absl::MutexLock lock(&mu_);
  int64_t replaced_bytes = 0;
  const ModelLifecycle::LoadOutcome outcome = models_[name].FinishLoad(
      std::move(created), status, clock_.Now(), &replaced, &replaced_bytes);
  if (replaced != nullptr) {
    CountUntilFreedLocked(name, replaced, replaced_bytes, kStillInUse);
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
        NoteWakeRateLocked(name, model);
        model.StartPromotion();
        *promotion = Promotion{ready, model.tier(), casting::WeightTier::kHot,
                               "request"};
      }
      return model.HoldForRequest();
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
  absl::Time drain_deadline;
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
    // From the moment the model shows UNLOADING.
    drain_deadline = clock_.Now() + max_unload_drain_;
    if (draining != nullptr) {
      CountUntilFreedLocked(name, draining, draining_bytes, kStillInUse);
    }
    NoteAccountingLocked();
    NoteChangeLocked();
  }
  if (draining != nullptr) {
    Log(LogLevel::kInfo, "unloading model", {{"model", name}});
    {
      absl::MutexLock lock(&mu_);
      DrainLocked(name, *draining, drain_deadline);
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
  struct Measurement {
    std::string name;
    std::shared_ptr<ServedModel> model;
    uint64_t tier_changes = 0;
    int64_t bytes = 0;
  };
  std::vector<Measurement> measurements;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, model] : models_) {
      if (std::shared_ptr<ServedModel> served = model.ready()) {
        measurements.push_back({name, std::move(served), model.tier_changes()});
      }
    }
  }
  // Unlocked: a measurement walks every weight.
  for (Measurement& measurement : measurements) {
    measurement.bytes = measurement.model->measured_bytes();
  }
  absl::MutexLock lock(&mu_);
  for (const Measurement& measurement : measurements) {
    models_[measurement.name].SetMeasured(
        measurement.model.get(), measurement.bytes, measurement.tier_changes);
  }
  NoteAccountingLocked();
}

int64_t ModelManagerImpl::AccountedBytesLocked() {
  releasing_.erase(std::remove_if(releasing_.begin(), releasing_.end(),
                                  [](const Releasing& releasing) {
                                    return releasing.owner.expired();
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
      // A request holds the model from GetReady until it ends; queued, it
      // is also pending.
      const int64_t in_flight =
          std::max<int64_t>(ready->pending_requests(), model.request_holds());
      if (in_flight > 0) state = InFlight(in_flight);
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
    holders.push_back({releasing.name, releasing.bytes, releasing.state});
  }
  return holders;
}

void ModelManagerImpl::CountUntilFreedLocked(
    const std::string& name, const std::shared_ptr<const void>& owner,
    int64_t bytes, const char* state) {
  if (bytes > 0 && owner != nullptr) {
    releasing_.push_back({name, WatchFreed(owner), bytes, state});
  }
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
    ModelLifecycle& model = models_[victim];
    const int64_t bytes = model.served_bytes();
    Log(LogLevel::kInfo, "evicted model to stay within the memory budget",
        {{"model", victim}, {"for", keep}, {"bytes", bytes}});
    LifecycleMetrics::Global().RecordEviction(victim);
    evicted.push_back(model.Evict());
    CountUntilFreedLocked(victim, evicted.back(), bytes, kStillInUse);
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

}  // namespace lifecycle_internal

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
  return std::unique_ptr<ModelManager>(
      new lifecycle_internal::ModelManagerImpl(options));
}

}  // namespace castserve
