#include "server/lifecycle/model_manager.h"

#include <malloc.h>

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

// How often GetReady re-checks the budget (weights materialize lazily, so
// READY models grow while they serve).
constexpr absl::Duration kBudgetCheckInterval = absl::Milliseconds(100);
// How often Unload looks whether the in-flight requests have finished.
constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(2);

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

// Drives each model's ModelLifecycle: claims, loads through the factory,
// unloads, evicts under the LruEvictionPolicy, and reads configs from the
// ModelCatalog. Load work GetReady starts runs on the executor.
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

 private:
  // Waits until no load or unload of `name` runs, then claims it.
  void ClaimLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads `name`, claimed by the caller, with `config` (parsed once, by
  // the caller), and releases the claim.
  absl::Status RunClaimedLoad(const std::string& name, Config config);
  absl::StatusOr<std::shared_ptr<ServedModel>> CreateModel(
      const std::string& name, const inference::ModelConfig& config,
      std::shared_ptr<models::Cancellation> cancellation);
  void FinishLoad(const std::string& name, std::shared_ptr<ServedModel> created,
                  const absl::Status& status);
  void StartLoadOnRequestLocked(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Describes `name`, not loaded, from its config (at startup, also logs a
  // bad one); `only_if_new`: unless the manager knows it already.
  void NoteNotLoaded(const std::string& name, const Config& config,
                     bool loads_on_request, bool only_if_new)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::shared_ptr<ServedModel>> WaitUntilReady(
      const std::string& name, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Evicts idle models, least recently used first, until the READY models
  // (with `incoming` in place of the READY `keep`, if given) fit the budget.
  absl::Status MakeRoom(const std::string& keep, const ServedModel* incoming)
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t UsedBytes(const std::string& keep, const ServedModel* incoming);
  // The evicted model, to be released unlocked; null if none could go.
  std::shared_ptr<ServedModel> EvictOneLocked(const std::string& keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeEnforceBudget(const std::string& keep) ABSL_LOCKS_EXCLUDED(mu_);

  const ModelRepository& repository_;
  const ModelCatalog catalog_;
  ServedModelFactory& factory_;
  platform::Executor& executor_;
  platform::Clock& clock_;
  const LruEvictionPolicy eviction_;
  // The parent of every load's cancellation.
  const std::shared_ptr<models::Cancellation> cancel_all_;

  absl::Mutex mu_;
  // Signalled on every state change of any model and when a loader ends.
  absl::CondVar changed_;
  std::map<std::string, ModelLifecycle> models_ ABSL_GUARDED_BY(mu_);
  int active_loaders_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_budget_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

ModelManagerImpl::~ModelManagerImpl() {
  absl::MutexLock lock(&mu_);
  while (active_loaders_ > 0) changed_.Wait(&mu_);
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
      ClaimLocked(entry.name);
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

void ModelManagerImpl::ClaimLocked(const std::string& name) {
  while (models_[name].busy()) changed_.Wait(&mu_);
  models_[name].Claim();
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
    ClaimLocked(name);
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
    changed_.SignalAll();
  }
  absl::Status status = config.status();
  if (status.ok()) status = MakeRoom(name, nullptr);
  std::shared_ptr<ServedModel> created;
  if (status.ok()) {
    absl::StatusOr<std::shared_ptr<ServedModel>> made =
        CreateModel(name, *config, cancellation);
    status = made.status();
    if (made.ok()) created = *std::move(made);
  }
  if (status.ok()) {
    status = MakeRoom(name, created.get());
    if (!status.ok()) created.reset();  // Frees what was just loaded.
  }
  FinishLoad(name, std::move(created), status);
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
  switch (models_[name].FinishLoad(std::move(created), status, clock_.Now(),
                                   &replaced)) {
    case ModelLifecycle::LoadOutcome::kReady:
      Log(LogLevel::kInfo, "model ready", {{"model", name}});
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
  changed_.SignalAll();
}

void ModelManagerImpl::StartLoadOnRequestLocked(const std::string& name) {
  models_[name].Claim(/*on_request=*/true);
  ++active_loaders_;
  executor_.Schedule([this, name] {
    // FinishLoad logs a failure.
    RunClaimedLoad(name, catalog_.ConfigFor(name, std::nullopt)).IgnoreError();
    absl::MutexLock lock(&mu_);
    --active_loaders_;
    changed_.SignalAll();
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
  absl::StatusOr<std::shared_ptr<ServedModel>> ready =
      WaitUntilReady(name, deadline);
  if (ready.ok()) MaybeEnforceBudget(name);
  return ready;
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelManagerImpl::WaitUntilReady(
    const std::string& name, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    ModelLifecycle& model = models_[name];
    if (std::shared_ptr<ServedModel> ready = model.ready()) {
      model.MarkUsed(clock_.Now());
      return ready;
    }
    if (!model.busy() && model.loads_on_request()) {
      StartLoadOnRequestLocked(name);
    }
    if (!model.busy()) {
      return absl::UnavailableError(
          absl::StrCat("model ", name, " is not ready: ", model.reason()));
    }
    if (clock_.WaitWithDeadline(&changed_, &mu_, deadline) &&
        clock_.Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "model ", name, " did not become ready before the deadline (",
          models_[name].reason(), ")"));
    }
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
    }
    ClaimLocked(name);
    draining = models_[name].StartUnload();
    changed_.SignalAll();
  }
  if (draining != nullptr) {
    Log(LogLevel::kInfo, "unloading model", {{"model", name}});
    while (draining->pending_requests() > 0) {
      absl::SleepFor(kDrainPollInterval);
    }
    // The model dies with the last reference: ours, now that no request
    // holds one (a request stops counting as pending only after its
    // callback let go of the model).
    draining.reset();
    ReturnFreedMemoryToTheSystem();
  }
  absl::MutexLock lock(&mu_);
  models_[name].FinishUnload();
  changed_.SignalAll();
  return absl::OkStatus();
}

void ModelManagerImpl::CancelAll(const std::string& reason) {
  cancel_all_->Cancel(reason);
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

int64_t ModelManagerImpl::UsedBytes(const std::string& keep,
                                    const ServedModel* incoming) {
  // Measured outside the lock: a footprint waits on the weights' locks.
  int64_t used_bytes = incoming != nullptr ? MeasuredBytes(*incoming) : 0;
  for (const auto& [name, model] : ReadyModels()) {
    if (incoming != nullptr && name == keep) continue;  // Being replaced.
    used_bytes += MeasuredBytes(*model);
  }
  return used_bytes;
}

absl::Status ModelManagerImpl::MakeRoom(const std::string& keep,
                                        const ServedModel* incoming) {
  if (!eviction_.has_budget()) return absl::OkStatus();
  const bool with_incoming = incoming != nullptr;
  if (with_incoming) {
    // A model that cannot fit even alone must not cost the others their
    // place: fail before evicting anything.
    absl::Status alone = eviction_.CheckAlone(keep, MeasuredBytes(*incoming));
    if (!alone.ok()) return alone;
  }
  for (;;) {
    const int64_t used_bytes = UsedBytes(keep, incoming);
    if (eviction_.Fits(used_bytes, with_incoming)) return absl::OkStatus();
    std::shared_ptr<ServedModel> evicted;
    {
      absl::MutexLock lock(&mu_);
      evicted = EvictOneLocked(keep);
    }
    if (evicted == nullptr) {
      return eviction_.NothingToEvict(keep, used_bytes, with_incoming);
    }
    evicted.reset();  // Frees the evicted model, unlocked.
    ReturnFreedMemoryToTheSystem();
  }
}

std::shared_ptr<ServedModel> ModelManagerImpl::EvictOneLocked(
    const std::string& keep) {
  std::vector<EvictionCandidate> candidates;
  candidates.reserve(models_.size());
  for (const auto& [name, model] : models_) {
    candidates.push_back({name, model.last_used(), model.Evictable()});
  }
  std::optional<std::string> victim = eviction_.PickVictim(candidates, keep);
  if (!victim.has_value()) return nullptr;
  Log(LogLevel::kInfo, "evicted model to stay within the memory budget",
      {{"model", *victim}, {"for", keep}});
  LifecycleMetrics::Global().RecordEviction(*victim);
  changed_.SignalAll();
  return models_[*victim].Evict();
}

void ModelManagerImpl::MaybeEnforceBudget(const std::string& keep) {
  if (!eviction_.has_budget()) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    if (now - last_budget_check_ < kBudgetCheckInterval) return;
    last_budget_check_ = now;
  }
  // Checked like the end of a load: `keep` serves in place of itself.
  std::shared_ptr<ServedModel> kept;
  for (auto& [name, model] : ReadyModels()) {
    if (name == keep) kept = model;
  }
  if (kept == nullptr) return;
  absl::Status fits = MakeRoom(keep, kept.get());
  if (!fits.ok()) {
    Log(LogLevel::kWarning, "over the memory budget",
        {{"model", keep}, {"error", fits.ToString()}});
  }
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
