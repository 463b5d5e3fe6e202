#include "server/test_util/fake_model_manager.h"

#include <ATen/ATen.h>

#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::testing {

FakeServedModel::FakeServedModel(const std::string& name) {
  config_.set_name(name);
  config_.set_max_batch_size(4);
  config_.mutable_dynamic_batching()->set_max_queue_delay_microseconds(100);
  inputs_ = {{"x", at::kFloat, {-1, 2}},
             {"scale", at::kFloat, {-1, 1}, /*optional=*/true}};
  outputs_ = {{"y", at::kFloat, {-1, 2}}, {"sum", at::kFloat, {-1}}};
}

void FakeServedModel::Infer(InferenceRequest request,
                            std::function<void(InferenceResult)> done) {
  {
    absl::MutexLock lock(&mutex_);
    ++infer_calls_;
    last_deadline_ = request.deadline;
  }
  std::thread([this, request = std::move(request), done = std::move(done)] {
    InferenceResult result;
    result.executed_batch_size = request.inputs.at("x").size(0);
    if (request.is_cancelled && request.is_cancelled()) {
      result.outputs = absl::CancelledError("cancelled");
    } else if (absl::Now() > request.deadline) {
      result.outputs = absl::DeadlineExceededError("deadline passed");
    } else {
      at::Tensor y = request.inputs.at("x") * 2;
      auto scale = request.inputs.find("scale");
      if (scale != request.inputs.end()) y = y * scale->second;
      result.outputs = models::NamedTensors{{"y", y}, {"sum", y.sum(1)}};
    }
    if (result.outputs.ok() && request.write_response) {
      absl::Status written = request.write_response(*result.outputs);
      if (!written.ok()) result.outputs = std::move(written);
    }
    result.compute_duration = absl::Microseconds(5);
    {
      absl::MutexLock lock(&mutex_);
      const bool ok = result.outputs.ok();
      stats_.inference_count += result.executed_batch_size;
      stats_.execution_count += 1;
      (ok ? stats_.success_count : stats_.fail_count) += 1;
      stats_.compute_duration += result.compute_duration;
      auto& batch = stats_.batches[result.executed_batch_size];
      batch.first += 1;
      batch.second += result.compute_duration;
      stats_.last_inference_ms = absl::ToUnixMillis(absl::Now());
    }
    done(std::move(result));
  }).detach();
}

void FakeServedModel::RecordRejection(absl::StatusCode code) {
  absl::MutexLock lock(&mutex_);
  stats_.fail_count += 1;
}

ServedModelStatistics FakeServedModel::statistics() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

casting::Footprint FakeServedModel::footprint() const {
  casting::Footprint footprint;
  footprint.AddResident("bf16", 2000);
  footprint.AddMapped(1 << 20);
  return footprint;
}

int FakeServedModel::infer_calls() const {
  absl::MutexLock lock(&mutex_);
  return infer_calls_;
}

absl::Time FakeServedModel::last_deadline() const {
  absl::MutexLock lock(&mutex_);
  return last_deadline_;
}

void FakeModelManager::AddModel(const std::string& name, bool lazy,
                                bool broken) {
  absl::MutexLock lock(&mutex_);
  Entry& entry = models_[name];
  entry.model = std::make_shared<FakeServedModel>(name);
  entry.broken = broken;
  entry.ready = false;
  entry.reason = lazy ? "loads on first request" : "";
  if (!lazy) LoadLocked(entry).IgnoreError();
}

std::shared_ptr<FakeServedModel> FakeModelManager::model(
    const std::string& name) {
  absl::MutexLock lock(&mutex_);
  return models_.at(name).model;
}

std::optional<inference::ModelConfig> FakeModelManager::last_override(
    const std::string& name) {
  absl::MutexLock lock(&mutex_);
  return models_.at(name).last_override;
}

absl::Status FakeModelManager::LoadLocked(Entry& entry) {
  if (entry.broken) {
    entry.ready = false;
    entry.reason = "broken checkpoint";
    return absl::UnavailableError(entry.reason);
  }
  entry.ready = true;
  entry.reason.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ServedModel>> FakeModelManager::GetReady(
    const std::string& name, const std::string& version, absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  auto it = models_.find(name);
  if (it == models_.end() || !(version.empty() || version == "1")) {
    return absl::NotFoundError(
        absl::StrCat("unknown model '", name, "' version '", version, "'"));
  }
  if (!it->second.ready) {
    if (absl::Status status = LoadLocked(it->second); !status.ok()) {
      return status;
    }
  }
  return std::shared_ptr<ServedModel>(it->second.model);
}

absl::Status FakeModelManager::Load(
    const std::string& name,
    std::optional<inference::ModelConfig> config_override) {
  if (name.empty() || name.find('/') != std::string::npos ||
      name.find("..") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad name '", name, "'"));
  }
  absl::MutexLock lock(&mutex_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  it->second.last_override = std::move(config_override);
  return LoadLocked(it->second);
}

absl::Status FakeModelManager::Unload(const std::string& name) {
  absl::MutexLock lock(&mutex_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  it->second.ready = false;
  it->second.reason = "unloaded";
  return absl::OkStatus();
}

std::vector<ModelStatus> FakeModelManager::Index() {
  absl::MutexLock lock(&mutex_);
  std::vector<ModelStatus> index;
  for (const auto& [name, entry] : models_) {
    index.push_back(
        {name, "1", entry.ready ? ModelState::kReady : ModelState::kUnavailable,
         entry.reason});
  }
  return index;
}

absl::StatusOr<ModelStatus> FakeModelManager::Status(const std::string& name) {
  for (const ModelStatus& status : Index()) {
    if (status.name == name) return status;
  }
  return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
}

std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
FakeModelManager::ReadyModels() {
  absl::MutexLock lock(&mutex_);
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>> ready;
  for (const auto& [name, entry] : models_) {
    if (entry.ready) ready.emplace_back(name, entry.model);
  }
  return ready;
}

}  // namespace castserve::testing
