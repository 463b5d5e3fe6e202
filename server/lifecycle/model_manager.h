// The model lifecycle: which models of the repository are loaded, in which
// state, and under what memory budget. The manager composes a ModelCatalog
// (names, directories, configs: model_catalog.h), one ModelLifecycle per
// model (the state machine: model_lifecycle.h) and an LruEvictionPolicy
// (lru_eviction_policy.h).
//
// States (Triton's strings in RepositoryIndex): UNAVAILABLE -> LOADING ->
// READY -> UNLOADING -> UNAVAILABLE, each with a reason when not READY.
// `startup` models load when the manager starts; `first_request` models load
// when first asked for, callers waiting up to their deadline. A reload with a
// new config builds the new model beside the old one and swaps it in only
// once it is ready; in-flight requests finish on the old one.
//
// Memory budget (`memory_budget_bytes`, a ceiling on what the models hold):
// - Admission counts what a model will hold when it serves. Before a load
//   builds anything, the factory projects the model's configured footprint
//   from the checkpoint's headers and the weight policy
//   (ServedModelFactory::ProjectedBytes), and the load reserves it.
// - A model counts as the largest of its reservation, its tracking-allocator
//   bytes and its weights' owned footprint (ServedModel::measured_bytes); a
//   running load as its reservation; an unloaded, evicted or replaced model as
//   what it counted until its last reference is gone (in-flight requests hold
//   it).
// - A load whose reservation does not fit beside what is counted unloads the
//   least recently used idle models (only when that makes room). When the
//   models that hold the memory are busy (requests in flight, loading,
//   being freed), the load waits for them to go idle or be freed, until its
//   deadline: the latest deadline of the requests waiting for it, capped at
//   `max_wait_for_memory` after the load's claim (computed once per load; an
//   explicit or startup load waits that long). The wait wakes on every
//   change the manager makes and looks for models gone idle every few
//   milliseconds, measuring again only after a change. Unload and shutdown
//   cancel the wait.
// - RESOURCE_EXHAUSTED, naming the model, the bytes it needs, the budget and
//   who holds what: at once for a model whose projection alone exceeds the
//   budget, or a reload whose projection does not fit beside the version it
//   replaces (nothing is evicted for them), else when the deadline passes. A
//   request-started load that failed so loads again on a later request.
// - Unload waits for the model's in-flight requests at most
//   `max_unload_drain`; requests still running then keep the model, counted
//   against the budget, until they end.
// - Measurements above the reservations (activations, a projection that fell
//   short) are checked after every load and at most every 100 ms on
//   requests: idle models are demoted, then evicted, to get back under the
//   budget.
//
// Memory tiers (`memory_tiers`; tier_policy.h): a READY model is hot, warm
// or cool, and counts its tier's projected bytes
// (ServedModelFactory::ProjectedTierBytes) or its measurement, the larger.
// - Pressure: before a load or promotion unloads anything, the manager
//   demotes idle models one tier at a time (hot -> warm before warm -> cool,
//   then lower `priority`, then least recently used), measuring again after
//   each, until the reservation fits; it unloads only when no demotion is
//   left. Nothing goes below its `pin`; a pinned model is never unloaded.
// - Promotion: GetReady of a model below hot reserves the bytes back up to
//   hot as a load does (demoting or evicting others, or waiting up to the
//   request's deadline), then marks it hot: its forward builds back layer
//   by layer. Concurrent requests wait for that one promotion.
// - keep_alive: a READY model idle that long is demoted one tier, and one
//   more after each further keep_alive, down to its pin or cool (never
//   unloaded), on a thread of the manager's executor reading its clock.
// - Moves free memory outside the manager's lock, one per model at a time;
//   a request on another model never waits for one. A move counts the tier
//   it leaves until it ends.
#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/cancellation.h"
#include "platform/clock.h"
#include "platform/executor.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/model_lifecycle.h"
#include "server/lifecycle/model_repository.h"
#include "server/lifecycle/served_model.h"
#include "server/lifecycle/tier_policy.h"

namespace castserve {

// Makes a ServedModel from a model's directory and configuration. The seam
// that lets tests run the manager without real checkpoints.
class ServedModelFactory {
 public:
  virtual ~ServedModelFactory() = default;
  // Once `cancellation` is set (the model was unloaded while loading, the
  // daemon shuts down), the load stops at its next step and fails
  // CANCELLED, and the created model's forwards stop too.
  virtual absl::StatusOr<std::shared_ptr<ServedModel>> Create(
      const std::string& model_directory, const inference::ModelConfig& config,
      std::shared_ptr<const models::Cancellation> cancellation) = 0;

  // The bytes the model Create would make holds once it serves (its
  // configured footprint: storage, cached compute copies, a bound on the
  // transient ones, buffers), known before any tensor data is read: the
  // manager reserves them against the budget before calling Create. The
  // errors Create would return for a bad config or checkpoint.
  virtual absl::StatusOr<int64_t> ProjectedBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) = 0;

  // The same projection in each memory tier (tier_policy.h): what the model
  // holds hot (ProjectedBytes), warm and cool. This default: every tier
  // holds ProjectedBytes, so the model is never demoted, only unloaded.
  virtual absl::StatusOr<TierBytes> ProjectedTierBytes(
      const std::string& model_directory,
      const inference::ModelConfig& config) {
    absl::StatusOr<int64_t> bytes = ProjectedBytes(model_directory, config);
    if (!bytes.ok()) return bytes.status();
    return TierBytes::Flat(*bytes);
  }
};

struct ModelManagerOptions {
  ModelRepository* repository = nullptr;  // Not owned; outlives the manager.
  ServedModelFactory* factory = nullptr;  // Not owned; outlives the manager.
  // 0 means no budget.
  int64_t memory_budget_bytes = 0;
  // When set (may be null), cancels everything like CancelAll.
  std::shared_ptr<const models::Cancellation> stop;
  // Runs the loads GetReady starts (not owned; outlives the manager). Null:
  // platform::Executor::Default(). The manager's destructor cancels and waits
  // for them.
  platform::Executor* executor = nullptr;
  // What load times, last-use times, the budget check's interval and the
  // wait for a first-request load read (not owned; outlives the manager).
  platform::Clock* clock = &platform::Clock::Real();
  // How long an explicit or startup load waits for busy models to make room
  // in the budget, and the longest a load GetReady started waits.
  absl::Duration max_wait_for_memory = absl::Minutes(1);
  // How long Unload waits for the model's in-flight requests (each also
  // bounded by its own deadline) before it finishes without them.
  absl::Duration max_unload_drain = absl::Minutes(5);
  // Memory tiers: false keeps every model hot (the budget only unloads).
  bool memory_tiers = true;
  // keep_alive of a model whose config leaves tiers.keep_alive empty;
  // InfiniteDuration: never demoted for idleness.
  absl::Duration keep_alive = absl::InfiniteDuration();
  // Called with the bytes counted against the budget after every change
  // that may raise them (a reservation, a load's end, a measurement, an
  // eviction, an unload), under the manager's lock: it must not call the
  // manager. For tests and metrics; may be empty.
  std::function<void(int64_t accounted_bytes)> on_accounted_bytes;
};

// Thread-safe.
class ModelManager {
 public:
  static absl::StatusOr<std::unique_ptr<ModelManager>> Create(
      ModelManagerOptions options);
  virtual ~ModelManager() = default;

  // Scans the repository and loads every `startup` model (a failure makes
  // that model UNAVAILABLE with the reason; the others load). Returns when
  // all have finished loading or failed.
  virtual void LoadStartupModels() = 0;

  // The READY model `name` (version "" or "1"). A `first_request` model that
  // is not loaded starts loading and the call waits, up to `deadline`.
  // NOT_FOUND for unknown names or versions, UNAVAILABLE with the reason for
  // a model that failed to load or is unloaded, DEADLINE_EXCEEDED.
  virtual absl::StatusOr<std::shared_ptr<ServedModel>> GetReady(
      const std::string& name, const std::string& version,
      absl::Time deadline) = 0;

  // RepositoryModelLoad: (re)loads `name`, with `config_override` instead of
  // its config.pbtxt when given. Waits until READY or failed.
  // INVALID_ARGUMENT for names with '/', "..", NUL or empty.
  virtual absl::Status Load(
      const std::string& name,
      std::optional<inference::ModelConfig> config_override) = 0;

  // RepositoryModelUnload: stops taking requests for `name`, lets in-flight
  // ones finish, frees its memory. A load of `name` still running is
  // cancelled first (its forwards stop at the next module).
  virtual absl::Status Unload(const std::string& name) = 0;

  // RepositoryModelLoad with parameter `tier`: moves the READY model `name`
  // to `tier` without reloading it (down: frees what the tier keeps no
  // longer, waiting for its running forwards; up: reserves the bytes as a
  // promotion does), returning once the move is done. The whole model moves
  // and stays there until a request promotes it or pressure or keep_alive
  // move it lower. A tier that would free nothing lands in the tier above
  // (tier_policy.h, EffectiveTier). FAILED_PRECONDITION naming the pin
  // below it, for a model that is not READY, or with memory tiers off;
  // NOT_FOUND for unknown models.
  virtual absl::Status MoveTo(const std::string& name,
                              casting::WeightTier tier) = 0;

  // Shutdown: cancels every load and every forward of every model, for
  // good (they fail CANCELLED with `reason`); the manager only drains after.
  virtual void CancelAll(const std::string& reason) = 0;

  // Every model of the repository and each loaded one, sorted by name.
  virtual std::vector<ModelStatus> Index() = 0;

  // The status of one model; NOT_FOUND if unknown.
  virtual absl::StatusOr<ModelStatus> Status(const std::string& name) = 0;

  // READY models, for statistics and metrics.
  virtual std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
  ReadyModels() = 0;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_MANAGER_H_
