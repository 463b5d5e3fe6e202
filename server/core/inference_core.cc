#include "server/core/inference_core.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "casting/memory/weight_tier.h"
#include "platform/sanitized_text.h"
#include "server/lifecycle/model_catalog.h"
#include "server/lifecycle/tier_policy.h"
#include "server/metrics/unrouted_requests.h"
#include "server/version.h"

namespace castserve {
namespace {

using ModelOrStatus = absl::StatusOr<std::shared_ptr<ServedModel>>;

// The call's deadline, shortened by the request's "timeout" parameter
// (microseconds, Triton's reserved key; 0 means none). INVALID_ARGUMENT for
// a timeout that is negative or not an integer.
absl::StatusOr<absl::Time> RequestDeadline(
    absl::Time call_deadline, const inference::ModelInferRequest& request,
    platform::Clock& clock) {
  absl::Time deadline = call_deadline;
  auto timeout = request.parameters().find("timeout");
  if (timeout == request.parameters().end()) return deadline;
  const inference::InferParameter& value = timeout->second;
  int64_t microseconds = -1;
  if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    microseconds = value.int64_param();
  } else if (value.parameter_choice_case() ==
                 inference::InferParameter::kUint64Param &&
             value.uint64_param() <=
                 static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    microseconds = static_cast<int64_t>(value.uint64_param());
  }
  if (microseconds < 0) {
    return absl::InvalidArgumentError(
        "parameter 'timeout' must be a non-negative integer (int64_param: "
        "microseconds, 0 for none)");
  }
  if (microseconds > 0) {
    deadline =
        std::min(deadline, clock.Now() + absl::Microseconds(microseconds));
  }
  return deadline;
}

// Calls `then` with the READY model `name`: inline when it is READY now,
// otherwise on the executor, since a first-request load can take seconds
// and must not hold the caller's thread.
void WithReadyModel(ModelManager* manager, platform::Executor* executor,
                    const std::string& name, const std::string& version,
                    absl::Time deadline,
                    std::function<void(ModelOrStatus)> then) {
  absl::StatusOr<ModelStatus> status = manager->Status(name);
  if (status.ok() && status->state == ModelState::kReady) {
    then(manager->GetReady(name, version, deadline));
    return;
  }
  executor->Schedule(
      [manager, name, version, deadline, then = std::move(then)] {
        then(manager->GetReady(name, version, deadline));
      });
}

void FillTensorMetadata(
    const std::vector<TensorSpec>& specs,
    google::protobuf::RepeatedPtrField<
        inference::ModelMetadataResponse::TensorMetadata>* metadata) {
  for (const TensorSpec& spec : specs) {
    auto* tensor = metadata->Add();
    tensor->set_name(spec.name);
    tensor->set_datatype(spec.datatype);
    for (int64_t dim : spec.shape) tensor->add_shape(dim);
  }
}

void SetDuration(uint64_t count, absl::Duration duration,
                 inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(static_cast<uint64_t>(absl::ToInt64Nanoseconds(duration)));
}

void FillStatistics(const ServedModel& model, inference::ModelStatistics* out) {
  const ServedModelStatistics stats = model.statistics();
  out->set_last_inference(stats.last_inference_ms);
  out->set_inference_count(stats.inference_count);
  out->set_execution_count(stats.execution_count);
  inference::InferStatistics* infer = out->mutable_inference_stats();
  SetDuration(stats.success_count, stats.success_duration,
              infer->mutable_success());
  SetDuration(stats.fail_count, stats.fail_duration, infer->mutable_fail());
  SetDuration(stats.success_count, stats.queue_duration,
              infer->mutable_queue());
  // castserve times the forward as a whole: input and output conversion
  // are inside compute_infer.
  SetDuration(stats.success_count, absl::ZeroDuration(),
              infer->mutable_compute_input());
  SetDuration(stats.success_count, stats.compute_duration,
              infer->mutable_compute_infer());
  SetDuration(stats.success_count, absl::ZeroDuration(),
              infer->mutable_compute_output());
  // No response cache: written as zeros, as Triton's clients and
  // perf_analyzer read every field of the REST statistics.
  SetDuration(0, absl::ZeroDuration(), infer->mutable_cache_hit());
  SetDuration(0, absl::ZeroDuration(), infer->mutable_cache_miss());
  for (const auto& [batch_size, count_and_duration] : stats.batches) {
    inference::InferBatchStatistics* batch = out->add_batch_stats();
    batch->set_batch_size(batch_size);
    const uint64_t count = count_and_duration.first;
    SetDuration(count, absl::ZeroDuration(), batch->mutable_compute_input());
    SetDuration(count, count_and_duration.second,
                batch->mutable_compute_infer());
    SetDuration(count, absl::ZeroDuration(), batch->mutable_compute_output());
  }
  for (const MemoryUsageEntry& entry : model.memory_usage()) {
    inference::MemoryUsage* memory = out->add_memory_usage();
    memory->set_type(entry.type);
    memory->set_id(entry.id);
    memory->set_byte_size(static_cast<uint64_t>(entry.bytes));
  }
}

// What a RepositoryModelLoad asks for: a config instead of config.pbtxt, or
// a memory tier to move the model to.
struct LoadParameters {
  std::optional<inference::ModelConfig> config;
  std::optional<casting::WeightTier> tier;
};

absl::StatusOr<casting::WeightTier> TierParameter(
    const inference::ModelRepositoryParameter& value) {
  if (value.parameter_choice_case() !=
      inference::ModelRepositoryParameter::kStringParam) {
    return absl::InvalidArgumentError(
        "parameter 'tier' must be a string (hot, warm or cool)");
  }
  absl::StatusOr<casting::WeightTier> tier =
      ParseWeightTier(value.string_param());
  if (!tier.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'tier': ", tier.status().message()));
  }
  return tier;
}

absl::StatusOr<LoadParameters> ParseLoadParameters(
    const inference::RepositoryModelLoadRequest& request) {
  LoadParameters parameters;
  for (const auto& [key, value] : request.parameters()) {
    if (absl::StartsWith(key, "file:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", key, "': castserve does not accept model files"));
    }
    if (key == "tier") {
      absl::StatusOr<casting::WeightTier> tier = TierParameter(value);
      if (!tier.ok()) return tier.status();
      parameters.tier = *tier;
      continue;
    }
    if (key != "config") continue;
    if (value.parameter_choice_case() !=
        inference::ModelRepositoryParameter::kStringParam) {
      return absl::InvalidArgumentError(
          "parameter 'config' must be a string (ModelConfig as JSON)");
    }
    inference::ModelConfig parsed;
    auto status = google::protobuf::util::JsonStringToMessage(
        value.string_param(), &parsed);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'config' is not a ModelConfig in JSON: ",
                       status.message().as_string()));
    }
    parameters.config = std::move(parsed);
  }
  if (parameters.tier.has_value() && parameters.config.has_value()) {
    return absl::InvalidArgumentError(
        "parameters 'tier' and 'config' cannot be combined: a tier moves the "
        "loaded model, a config reloads it");
  }
  return parameters;
}

// Loads `name` unless it is READY, then moves it to `tier`.
absl::Status LoadAndMove(ModelManager& manager, const std::string& name,
                         casting::WeightTier tier) {
  absl::StatusOr<ModelStatus> status = manager.Status(name);
  if (!status.ok()) return status.status();
  if (status->state != ModelState::kReady) {
    if (absl::Status loaded = manager.Load(name, std::nullopt); !loaded.ok()) {
      return loaded;
    }
  }
  return manager.MoveTo(name, tier);
}

}  // namespace

InferenceCore::InferenceCore(const std::atomic<bool>* ready,
                             ModelManager* manager, int64_t max_response_bytes,
                             TokenAuthenticator* auth,
                             platform::Executor* executor,
                             platform::Clock* clock)
    : ready_(ready),
      manager_(manager),
      executor_(executor != nullptr ? executor
                                    : &platform::Executor::Default()),
      max_response_bytes_(max_response_bytes),
      auth_(auth),
      clock_(*clock) {}

absl::Status InferenceCore::Authorize(const CallContext& call,
                                      Scope scope) const {
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Authorize(call.authorization, scope);
}

absl::Status InferenceCore::AuthorizeInference(const CallContext& call) const {
  absl::Status allowed = Authorize(call, Scope::kInfer);
  return allowed.ok() ? allowed : RefuseInference(std::move(allowed));
}

absl::Status InferenceCore::RefuseInference(absl::Status status) const {
  UnroutedRequests::Global().Record(status.code());
  return status;
}

void InferenceCore::ServerLive(CallContext /*call*/,
                               const inference::ServerLiveRequest& /*request*/,
                               inference::ServerLiveResponse* response,
                               CallDone done) {
  // Answering at all is the proof of liveness.
  response->set_live(true);
  done(absl::OkStatus());
}

void InferenceCore::ServerReady(
    CallContext /*call*/, const inference::ServerReadyRequest& /*request*/,
    inference::ServerReadyResponse* response, CallDone done) {
  response->set_ready(ready_->load());
  done(absl::OkStatus());
}

void InferenceCore::ServerMetadata(
    CallContext call, const inference::ServerMetadataRequest& /*request*/,
    inference::ServerMetadataResponse* response, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  // Only the extensions castserve implements; binary_tensor_data is the
  // REST port's binary tensor format.
  for (const char* extension : {"model_repository", "model_configuration",
                                "statistics", "binary_tensor_data"}) {
    response->add_extensions(extension);
  }
  done(absl::OkStatus());
}

void InferenceCore::ModelReady(CallContext call,
                               const inference::ModelReadyRequest& request,
                               inference::ModelReadyResponse* response,
                               CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  absl::StatusOr<ModelStatus> status = manager_->Status(request.name());
  response->set_ready(
      status.ok() && status->state == ModelState::kReady &&
      CheckModelVersion(request.name(), request.version()).ok());
  done(absl::OkStatus());
}

void InferenceCore::ModelMetadata(
    CallContext call, const inference::ModelMetadataRequest& request,
    inference::ModelMetadataResponse* response, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  WithReadyModel(
      manager_, executor_, request.name(), request.version(), call.deadline,
      [&request, response, done = std::move(done)](ModelOrStatus model) {
        if (!model.ok()) return done(model.status());
        const inference::ModelConfig& config = (*model)->config();
        response->set_name(request.name());
        response->add_versions("1");
        response->set_platform(config.platform().empty() ? kDefaultPlatform
                                                         : config.platform());
        FillTensorMetadata((*model)->inputs(), response->mutable_inputs());
        FillTensorMetadata((*model)->outputs(), response->mutable_outputs());
        done(absl::OkStatus());
      });
}

void InferenceCore::ModelConfig(CallContext call,
                                const inference::ModelConfigRequest& request,
                                inference::ModelConfigResponse* response,
                                CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  WithReadyModel(manager_, executor_, request.name(), request.version(),
                 call.deadline,
                 [response, done = std::move(done)](ModelOrStatus model) {
                   if (!model.ok()) return done(model.status());
                   inference::ModelConfig* config = response->mutable_config();
                   *config = (*model)->config();
                   if (config->platform().empty()) {
                     config->set_platform(kDefaultPlatform);
                   }
                   if (config->backend().empty()) {
                     config->set_backend(kDefaultBackend);
                   }
                   done(absl::OkStatus());
                 });
}

void InferenceCore::ModelInfer(CallContext call,
                               const inference::ModelInferRequest& request,
                               inference::ModelInferResponse* response,
                               CallDone done) {
  if (absl::Status allowed = AuthorizeInference(call); !allowed.ok()) {
    return done(allowed);
  }
  absl::StatusOr<absl::Time> deadline =
      RequestDeadline(call.deadline, request, clock_);
  if (!deadline.ok()) return done(RefuseInference(deadline.status()));
  auto run = [&request, deadline = *deadline,
              is_cancelled = std::move(call.is_cancelled),
              partial_response = std::move(call.partial_response),
              max_response_bytes =
                  max_response_bytes_ - call.response_envelope_bytes,
              response, done = std::move(done)](ModelOrStatus model) mutable {
    if (!model.ok()) {
      UnroutedRequests::Global().Record(model.status().code());
      return done(model.status());
    }
    InferenceCall inference;
    inference.request = &request;
    inference.response = response;
    inference.deadline = deadline;
    inference.is_cancelled = std::move(is_cancelled);
    inference.partial_response = std::move(partial_response);
    inference.max_response_bytes = max_response_bytes;
    // The served model validates the request, runs it and fills `response`;
    // `done` keeps the model alive until the call ends.
    (*model)->Infer(std::move(inference),
                    [model = *model, done = std::move(done)](
                        absl::Status status) { done(std::move(status)); });
  };
  WithReadyModel(manager_, executor_, request.model_name(),
                 request.model_version(), *deadline, std::move(run));
}

void InferenceCore::ModelStatistics(
    CallContext call, const inference::ModelStatisticsRequest& request,
    inference::ModelStatisticsResponse* response, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  if (absl::Status status =
          CheckModelVersion(request.name(), request.version());
      !status.ok()) {
    return done(status);
  }
  if (!request.name().empty()) {
    absl::StatusOr<ModelStatus> status = manager_->Status(request.name());
    if (!status.ok()) return done(status.status());
  }
  bool found = false;
  for (const auto& [name, model] : manager_->ReadyModels()) {
    if (!request.name().empty() && name != request.name()) continue;
    inference::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(name);
    stats->set_version("1");
    FillStatistics(*model, stats);
    found = true;
  }
  if (!request.name().empty() && !found) {
    // Known but not loaded: nothing has run yet.
    inference::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(request.name());
    stats->set_version("1");
  }
  done(absl::OkStatus());
}

void InferenceCore::ReadyModelConfigs(
    CallContext call, std::vector<inference::ModelConfig>* configs,
    CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kInfer); !allowed.ok()) {
    return done(allowed);
  }
  for (const auto& [name, model] : manager_->ReadyModels()) {
    configs->push_back(model->config());
    configs->back().set_name(name);
  }
  done(absl::OkStatus());
}

void InferenceCore::RepositoryIndex(
    CallContext call, const inference::RepositoryIndexRequest& request,
    inference::RepositoryIndexResponse* response, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kAdmin); !allowed.ok()) {
    return done(allowed);
  }
  for (const ModelStatus& status : manager_->Index()) {
    if (request.ready() && status.state != ModelState::kReady) continue;
    auto* model = response->add_models();
    model->set_name(status.name);
    model->set_version(status.version);
    model->set_state(ModelStateName(status.state));
    // Reasons quote files and configs: made valid UTF-8 here, the one
    // place they enter a response, so that one bad file cannot break the
    // index for every client.
    model->set_reason(platform::SanitizeText(status.reason));
    if (status.tier.has_value()) {
      model->set_tier(std::string(casting::WeightTierName(*status.tier)));
    }
  }
  done(absl::OkStatus());
}

void InferenceCore::RepositoryModelLoad(
    CallContext call, const inference::RepositoryModelLoadRequest& request,
    inference::RepositoryModelLoadResponse* /*response*/, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kAdmin); !allowed.ok()) {
    return done(allowed);
  }
  absl::StatusOr<LoadParameters> parameters = ParseLoadParameters(request);
  if (!parameters.ok()) return done(parameters.status());
  executor_->Schedule([manager = manager_, name = request.model_name(),
                       parameters = *std::move(parameters),
                       done = std::move(done)]() mutable {
    if (parameters.tier.has_value()) {
      return done(LoadAndMove(*manager, name, *parameters.tier));
    }
    done(manager->Load(name, std::move(parameters.config)));
  });
}

void InferenceCore::RepositoryModelUnload(
    CallContext call, const inference::RepositoryModelUnloadRequest& request,
    inference::RepositoryModelUnloadResponse* /*response*/, CallDone done) {
  if (absl::Status allowed = Authorize(call, Scope::kAdmin); !allowed.ok()) {
    return done(allowed);
  }
  executor_->Schedule(
      [manager = manager_, name = request.model_name(),
       done = std::move(done)] { done(manager->Unload(name)); });
}

}  // namespace castserve
