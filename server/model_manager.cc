#include "server/model_manager.h"

#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/model_config_loader.h"
#include "server/serving_metrics.h"

namespace castserve {
namespace {

// glibc keeps freed blocks in its arenas; a model's tensors are large enough
// that an unloaded model would otherwise stay in the resident set. Hands free
// memory at the top of every arena, and whole free pages, back to the kernel.
void ReturnFreedMemoryToTheSystem() { malloc_trim(0); }

namespace fs = std::filesystem;

// How often GetReady re-checks the budget (weights materialize lazily, so
// READY models grow while they serve).
constexpr absl::Duration kBudgetCheckInterval = absl::Milliseconds(100);
// How often Unload looks whether the in-flight requests have finished.
constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(2);

// Model names become directory names: nothing that could leave the
// repository or name a hidden entry, and no longer than a file name may be.
constexpr size_t kMaxModelNameBytes = 255;
absl::Status ValidateModelName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (name.size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", Abbreviated(name), "' is longer than ",
                     kMaxModelNameBytes, " bytes"));
  }
  if (name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("model name contains a NUL character");
  }
  if (name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' contains a path separator"));
  }
  if (name.find("..") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' contains '..'"));
  }
  if (name[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' starts with '.'"));
  }
  return absl::OkStatus();
}

// The bytes a model holds, measured. The tracking allocator sees what was
// allocated under the model's tag (weights made at load or by a forward,
// activations); the footprint sees the weights' own copies wherever they were
// made (also on a prefetch thread). The two overlap, so the larger one
// counts, never their sum.
int64_t MeasuredBytes(const ServedModel& model) {
  return std::max(model.tracked_bytes(), model.footprint().owned_bytes());
}

// Per model of the repository or loaded.
struct ModelSlot {
  ModelState state = ModelState::kUnavailable;
  std::string reason;
  // The model requests go to: set while READY, and while a reload builds the
  // new one beside it.
  std::shared_ptr<ServedModel> served;
  // A load or unload of this model is running; others wait for it.
  bool busy = false;
  // GetReady may start a load (first_request models, evicted models).
  bool load_on_request = false;
  // Set while a load runs: Unload cancels it.
  std::shared_ptr<models::Cancellation> loading;
  absl::Time last_used = absl::InfinitePast();
};

class ModelManagerImpl final : public ModelManager {
 public:
  explicit ModelManagerImpl(ModelManagerOptions options)
      : repository_(*options.repository),
        factory_(*options.factory),
        memory_budget_bytes_(options.memory_budget_bytes),
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
  std::string DirectoryOf(const std::string& name) const {
    return (fs::path(repository_.path()) / name).string();
  }
  bool InRepository(const std::string& name) const;
  // The status of a model of the repository that has no slot yet.
  ModelStatus UnloadedStatus(
      const std::string& name,
      const absl::StatusOr<inference::ModelConfig>& config) const;

  // Waits until no load or unload of `name` runs, then marks one as running.
  void ClaimLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads `name`, claimed by the caller, and releases the claim.
  absl::Status RunClaimedLoad(const std::string& name,
                              std::optional<inference::ModelConfig> override);
  void FinishLoad(const std::string& name, std::shared_ptr<ServedModel> created,
                  const absl::Status& status);
  void StartLoadOnRequestLocked(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a slot for `name`, not yet seen, from its config on disk.
  void AddSlotFromRepository(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Evicts idle models, least recently used first, until the READY models
  // (with `incoming` in place of the READY `keep`, if given) fit the budget;
  // before a load they must leave room (strictly under it).
  // RESOURCE_EXHAUSTED when no idle model is left to evict.
  absl::Status MakeRoom(const std::string& keep, const ServedModel* incoming)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool EvictLeastRecentlyUsedLocked(
      const std::string& keep,
      std::vector<std::shared_ptr<ServedModel>>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeEnforceBudget(const std::string& keep) ABSL_LOCKS_EXCLUDED(mu_);

  ModelRepository& repository_;
  ServedModelFactory& factory_;
  const int64_t memory_budget_bytes_;
  // The parent of every load's cancellation.
  const std::shared_ptr<models::Cancellation> cancel_all_;

  absl::Mutex mu_;
  // Signalled on every state change of any slot and when a loader ends.
  absl::CondVar changed_;
  std::map<std::string, ModelSlot> slots_ ABSL_GUARDED_BY(mu_);
  int active_loaders_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_budget_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

ModelManagerImpl::~ModelManagerImpl() {
  absl::MutexLock lock(&mu_);
  while (active_loaders_ > 0) changed_.Wait(&mu_);
}

bool ModelManagerImpl::InRepository(const std::string& name) const {
  return repository_.Contains(name);
}

ModelStatus ModelManagerImpl::UnloadedStatus(
    const std::string& name,
    const absl::StatusOr<inference::ModelConfig>& config) const {
  ModelStatus status{name, "1", ModelState::kUnavailable, "not loaded"};
  if (!config.ok()) {
    status.reason = std::string(config.status().message());
  } else if (config->load_policy() == inference::LOAD_POLICY_FIRST_REQUEST) {
    status.reason = "not loaded; loads on its first request";
  }
  return status;
}

void ModelManagerImpl::LoadStartupModels() {
  absl::StatusOr<std::vector<ModelEntry>> entries = repository_.Scan();
  if (!entries.ok()) {
    Log(LogLevel::kError, "cannot scan the model repository",
        {{"error", entries.status().ToString()}});
    return;
  }
  for (const ModelEntry& entry : *entries) {
    const bool startup =
        entry.config.ok() &&
        entry.config->load_policy() == inference::LOAD_POLICY_STARTUP;
    if (!startup) {
      absl::MutexLock lock(&mu_);
      ModelSlot& slot = slots_[entry.name];
      if (slot.busy || slot.served != nullptr) continue;
      slot.reason = UnloadedStatus(entry.name, entry.config).reason;
      slot.load_on_request = entry.config.ok();
      if (!entry.config.ok()) {
        Log(LogLevel::kError, "model configuration is invalid",
            {{"model", entry.name}, {"error", slot.reason}});
      }
      continue;
    }
    // A failure is logged by Load and leaves the model UNAVAILABLE; the
    // others still load.
    (void)Load(entry.name, std::nullopt);
  }
}

void ModelManagerImpl::ClaimLocked(const std::string& name) {
  while (slots_[name].busy) changed_.Wait(&mu_);
  slots_[name].busy = true;
}

absl::Status ModelManagerImpl::Load(
    const std::string& name,
    std::optional<inference::ModelConfig> config_override) {
  if (absl::Status valid = ValidateModelName(name); !valid.ok()) return valid;
  if (!InRepository(name)) {
    return absl::NotFoundError(
        absl::StrCat("model ", name, " is not in the repository"));
  }
  {
    absl::MutexLock lock(&mu_);
    ClaimLocked(name);
  }
  return RunClaimedLoad(name, std::move(config_override));
}

// The config a RepositoryModelLoad passed instead of config.pbtxt, checked
// like one read from disk.
absl::StatusOr<inference::ModelConfig> CheckOverride(
    const std::string& name, inference::ModelConfig config) {
  if (config.name().empty()) config.set_name(name);
  if (config.name() != name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "configuration names model '", config.name(), "', not '", name, "'"));
  }
  if (absl::Status valid = ValidateModelConfig(config); !valid.ok()) {
    return valid;
  }
  return config;
}

absl::Status ModelManagerImpl::RunClaimedLoad(
    const std::string& name, std::optional<inference::ModelConfig> override) {
  const std::string directory = DirectoryOf(name);
  // The created model keeps it: it also stops the model's forwards.
  auto cancellation = std::make_shared<models::Cancellation>(cancel_all_);
  {
    absl::MutexLock lock(&mu_);
    ModelSlot& slot = slots_[name];
    slot.loading = cancellation;
    if (slot.served == nullptr) {
      slot.state = ModelState::kLoading;
      slot.reason = "loading";
      changed_.SignalAll();
    }
  }
  absl::StatusOr<inference::ModelConfig> config =
      override.has_value() ? CheckOverride(name, *std::move(override))
                           : repository_.LoadConfig(name);
  absl::Status status = config.status();
  if (status.ok()) status = MakeRoom(name, nullptr);
  std::shared_ptr<ServedModel> created;
  if (status.ok()) {
    Log(LogLevel::kInfo, "loading model", {{"model", name}});
    const absl::Time load_start = absl::Now();
    absl::StatusOr<std::shared_ptr<ServedModel>> made =
        factory_.Create(directory, *config, cancellation);
    status = made.status();
    if (made.ok()) {
      created = *std::move(made);
      LifecycleMetrics::Global().RecordLoad(name, absl::Now() - load_start);
    }
  }
  if (status.ok()) {
    status = MakeRoom(name, created.get());
    if (!status.ok()) created.reset();  // Frees what was just loaded.
  }
  FinishLoad(name, std::move(created), status);
  return status;
}

void ModelManagerImpl::FinishLoad(const std::string& name,
                                  std::shared_ptr<ServedModel> created,
                                  const absl::Status& status) {
  std::shared_ptr<ServedModel> replaced;  // Released after the lock.
  absl::MutexLock lock(&mu_);
  ModelSlot& slot = slots_[name];
  slot.busy = false;
  slot.loading.reset();
  if (created != nullptr) {
    replaced = std::move(slot.served);
    slot.served = std::move(created);
    slot.state = ModelState::kReady;
    slot.reason.clear();
    slot.load_on_request = false;
    slot.last_used = absl::Now();
    Log(LogLevel::kInfo, "model ready", {{"model", name}});
  } else if (slot.served != nullptr) {
    slot.state = ModelState::kReady;  // A failed reload keeps the old one.
    Log(LogLevel::kError, "reload failed; the loaded model keeps serving",
        {{"model", name}, {"error", status.ToString()}});
  } else {
    slot.state = ModelState::kUnavailable;
    slot.reason = std::string(status.message());
    Log(LogLevel::kError, "model failed to load",
        {{"model", name}, {"error", status.ToString()}});
  }
  changed_.SignalAll();
}

void ModelManagerImpl::StartLoadOnRequestLocked(const std::string& name) {
  ModelSlot& slot = slots_[name];
  slot.busy = true;
  // Not again on its own after a failure: the reason stays visible until an
  // explicit load.
  slot.load_on_request = false;
  ++active_loaders_;
  std::thread([this, name] {
    RunClaimedLoad(name, std::nullopt).IgnoreError();  // FinishLoad logs.
    absl::MutexLock lock(&mu_);
    --active_loaders_;
    changed_.SignalAll();
  }).detach();
}

void ModelManagerImpl::AddSlotFromRepository(const std::string& name) {
  const absl::StatusOr<inference::ModelConfig> config =
      repository_.LoadConfig(name);
  const ModelStatus status = UnloadedStatus(name, config);
  absl::MutexLock lock(&mu_);
  if (slots_.count(name) > 0) return;  // Another caller was faster.
  ModelSlot& slot = slots_[name];
  slot.reason = status.reason;
  slot.load_on_request =
      config.ok() &&
      config->load_policy() == inference::LOAD_POLICY_FIRST_REQUEST;
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelManagerImpl::GetReady(
    const std::string& name, const std::string& version, absl::Time deadline) {
  if (!version.empty() && version != "1") {
    return absl::NotFoundError(
        absl::StrCat("model ", Abbreviated(name), " has no version ",
                     Abbreviated(version), " (only version 1)"));
  }
  if (!ValidateModelName(name).ok()) {
    return absl::NotFoundError(
        absl::StrCat("unknown model '", Abbreviated(name), "'"));
  }
  bool known;
  {
    absl::MutexLock lock(&mu_);
    known = slots_.count(name) > 0;
  }
  if (!known) {
    if (!InRepository(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    AddSlotFromRepository(name);
  }
  std::shared_ptr<ServedModel> ready;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      ModelSlot& slot = slots_[name];
      if (slot.state == ModelState::kReady && slot.served != nullptr) {
        slot.last_used = absl::Now();
        ready = slot.served;
        break;
      }
      if (!slot.busy && slot.load_on_request) StartLoadOnRequestLocked(name);
      if (!slot.busy) {
        return absl::UnavailableError(
            absl::StrCat("model ", name, " is not ready: ", slot.reason));
      }
      if (changed_.WaitWithDeadline(&mu_, deadline) &&
          absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "model ", name, " did not become ready before the deadline (",
            slots_[name].reason, ")"));
      }
    }
  }
  MaybeEnforceBudget(name);
  return ready;
}

absl::Status ModelManagerImpl::Unload(const std::string& name) {
  if (absl::Status valid = ValidateModelName(name); !valid.ok()) return valid;
  std::shared_ptr<ServedModel> draining;
  {
    absl::MutexLock lock(&mu_);
    if (slots_.count(name) == 0 && !InRepository(name)) {
      return absl::NotFoundError(absl::StrCat("unknown model ", name));
    }
    if (const auto& loading = slots_[name].loading; loading != nullptr) {
      loading->Cancel("the model was unloaded while it was loading");
      Log(LogLevel::kInfo, "cancelling the load of an unloaded model",
          {{"model", name}});
    }
    ClaimLocked(name);
    ModelSlot& slot = slots_[name];
    draining = std::move(slot.served);
    slot.state = draining ? ModelState::kUnloading : ModelState::kUnavailable;
    slot.reason =
        draining ? "unloading: waiting for in-flight requests" : "unloaded";
    slot.load_on_request = false;
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
  ModelSlot& slot = slots_[name];
  slot.state = ModelState::kUnavailable;
  slot.reason = "unloaded";
  slot.busy = false;
  changed_.SignalAll();
  return absl::OkStatus();
}

void ModelManagerImpl::CancelAll(const std::string& reason) {
  cancel_all_->Cancel(reason);
}

std::vector<ModelStatus> ModelManagerImpl::Index() {
  absl::StatusOr<std::vector<ModelEntry>> entries = repository_.Scan();
  std::map<std::string, ModelStatus> by_name;
  if (entries.ok()) {
    for (const ModelEntry& entry : *entries) {
      by_name[entry.name] = UnloadedStatus(entry.name, entry.config);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, slot] : slots_) {
      by_name[name] = ModelStatus{name, "1", slot.state, slot.reason};
    }
  }
  std::vector<ModelStatus> index;
  index.reserve(by_name.size());
  for (auto& [name, status] : by_name) index.push_back(std::move(status));
  return index;
}

absl::StatusOr<ModelStatus> ModelManagerImpl::Status(const std::string& name) {
  if (ValidateModelName(name).ok()) {
    {
      absl::MutexLock lock(&mu_);
      auto it = slots_.find(name);
      if (it != slots_.end()) {
        return ModelStatus{name, "1", it->second.state, it->second.reason};
      }
    }
    if (InRepository(name)) {
      return UnloadedStatus(name, repository_.LoadConfig(name));
    }
  }
  return absl::NotFoundError(absl::StrCat("unknown model ", Abbreviated(name)));
}

std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
ModelManagerImpl::ReadyModels() {
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>> ready;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, slot] : slots_) {
    if (slot.state == ModelState::kReady && slot.served != nullptr) {
      ready.emplace_back(name, slot.served);
    }
  }
  return ready;
}

absl::Status ModelManagerImpl::MakeRoom(const std::string& keep,
                                        const ServedModel* incoming) {
  if (memory_budget_bytes_ <= 0) return absl::OkStatus();
  if (incoming != nullptr) {
    // A model that cannot fit even alone must not cost the others their
    // place: fail before evicting anything.
    const int64_t incoming_bytes = MeasuredBytes(*incoming);
    if (incoming_bytes > memory_budget_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget exceeded: model ", keep, " alone needs ",
          incoming_bytes, " bytes, budget ", memory_budget_bytes_, " bytes"));
    }
  }
  for (;;) {
    // Measured outside the lock: a footprint waits on the weights' locks.
    int64_t used_bytes = incoming != nullptr ? MeasuredBytes(*incoming) : 0;
    for (const auto& [name, model] : ReadyModels()) {
      if (incoming != nullptr && name == keep) continue;  // Being replaced.
      used_bytes += MeasuredBytes(*model);
    }
    const bool fits = incoming != nullptr ? used_bytes <= memory_budget_bytes_
                                          : used_bytes < memory_budget_bytes_;
    if (fits) return absl::OkStatus();
    std::vector<std::shared_ptr<ServedModel>> evicted;
    {
      absl::MutexLock lock(&mu_);
      if (!EvictLeastRecentlyUsedLocked(keep, &evicted)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "memory budget exceeded: ", used_bytes, " bytes in use ",
            incoming != nullptr ? "with" : "before loading", " model ", keep,
            ", budget ", memory_budget_bytes_,
            " bytes, and no idle model left to evict"));
      }
    }
    evicted.clear();  // Frees the evicted models, unlocked.
    ReturnFreedMemoryToTheSystem();
  }
}

bool ModelManagerImpl::EvictLeastRecentlyUsedLocked(
    const std::string& keep,
    std::vector<std::shared_ptr<ServedModel>>* released) {
  ModelSlot* victim = nullptr;
  std::string victim_name;
  for (auto& [name, slot] : slots_) {
    if (name == keep || slot.busy || slot.state != ModelState::kReady ||
        slot.served == nullptr || slot.served->pending_requests() > 0) {
      continue;
    }
    if (victim == nullptr || slot.last_used < victim->last_used) {
      victim = &slot;
      victim_name = name;
    }
  }
  if (victim == nullptr) return false;
  released->push_back(std::move(victim->served));
  victim->state = ModelState::kUnavailable;
  victim->reason =
      "evicted to stay within the memory budget; loads again on its next "
      "request";
  victim->load_on_request = true;
  Log(LogLevel::kInfo, "evicted model to stay within the memory budget",
      {{"model", victim_name}, {"for", keep}});
  LifecycleMetrics::Global().RecordEviction(victim_name);
  changed_.SignalAll();
  return true;
}

void ModelManagerImpl::MaybeEnforceBudget(const std::string& keep) {
  if (memory_budget_bytes_ <= 0) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
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

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
  }
  return "UNAVAILABLE";
}

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
