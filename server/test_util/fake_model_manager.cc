#include "server/test_util/fake_model_manager.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "platform/executor.h"
#include "server/servables/tensor_conversion.h"

namespace castserve::testing {

FakeServedModel::FakeServedModel(const std::string& name) {
  config_.set_name(name);
  config_.set_max_batch_size(4);
  config_.mutable_dynamic_batching()->set_max_queue_delay_microseconds(100);
  inputs_ = {{"x", at::kFloat, {-1, 2}},
             {"scale", at::kFloat, {-1, 1}, /*optional=*/true}};
  outputs_ = {{"y", at::kFloat, {-1, 2}}, {"sum", at::kFloat, {-1}}};
  wire_inputs_ = WireSpecs(inputs_);
  wire_outputs_ = WireSpecs(outputs_);
}

void FakeServedModel::Infer(InferenceCall call,
                            std::function<void(absl::Status)> done) {
  {
    absl::MutexLock lock(&mutex_);
    ++infer_calls_;
    last_deadline_ = call.deadline;
  }
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(*call.request, inputs_, outputs_, config_.max_batch_size());
  if (!decoded.ok()) {
    recorder_.RecordRequest({decoded.status().code()}, absl::Now());
    return done(decoded.status());
  }
  // On a thread of the process's executor, as a served model answers on its
  // workers: the caller's thread returns first.
  platform::Executor::Default().Schedule([this, call = std::move(call),
                                          decoded = *std::move(decoded),
                                          done = std::move(done)] {
    {
      absl::MutexLock lock(&mutex_);
      ++held_;
      mutex_.Await(absl::Condition(
          +[](bool* holding) { return !*holding; }, &holding_));
      --held_;
    }
    const models::NamedTensors& inputs = decoded.inputs;
    absl::Status status;
    if (call.is_cancelled && call.is_cancelled()) {
      status = absl::CancelledError("cancelled");
    } else if (absl::Now() > call.deadline) {
      status = absl::DeadlineExceededError("deadline passed");
    } else {
      at::Tensor y = inputs.at("x") * 2;
      auto scale = inputs.find("scale");
      if (scale != inputs.end()) y = y * scale->second;
      status =
          FillResponseWithin(*call.request, outputs_, decoded.requested_outputs,
                             {{"y", y}, {"sum", y.sum(1)}},
                             call.max_response_bytes, call.response);
    }
    const absl::Duration compute = absl::Microseconds(5);
    recorder_.RecordBatch(decoded.batch_size, compute, 0);
    recorder_.RecordRequest({status.code(), decoded.batch_size,
                             absl::ZeroDuration(), compute, compute},
                            absl::Now());
    done(status);
  });
}

ServedModelStatistics FakeServedModel::statistics() const {
  return recorder_.snapshot();
}

casting::Footprint FakeServedModel::footprint() const {
  casting::Footprint footprint;
  footprint.AddResident("bf16", 2000);
  footprint.AddMapped(1 << 20);
  return footprint;
}

std::vector<MemoryUsageEntry> FakeServedModel::memory_usage() const {
  return MemoryUsageOf(*this);
}

casting::Device FakeServedModel::device() const {
  absl::MutexLock lock(&mutex_);
  return device_;
}

int64_t FakeServedModel::device_bytes() const {
  absl::MutexLock lock(&mutex_);
  return device_bytes_;
}

void FakeServedModel::PlaceOn(const casting::Device& device,
                              int64_t device_bytes) {
  absl::MutexLock lock(&mutex_);
  device_ = device;
  device_bytes_ = device_bytes;
}

int FakeServedModel::infer_calls() const {
  absl::MutexLock lock(&mutex_);
  return infer_calls_;
}

absl::Time FakeServedModel::last_deadline() const {
  absl::MutexLock lock(&mutex_);
  return last_deadline_;
}

void FakeServedModel::Hold() {
  absl::MutexLock lock(&mutex_);
  holding_ = true;
}

void FakeServedModel::Release() {
  absl::MutexLock lock(&mutex_);
  holding_ = false;
}

int FakeServedModel::held() const {
  absl::MutexLock lock(&mutex_);
  return held_;
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

void FakeModelManager::AddServedModel(const std::string& name,
                                      std::shared_ptr<ServedModel> served) {
  absl::MutexLock lock(&mutex_);
  Entry& entry = models_[name];
  entry.model = std::make_shared<FakeServedModel>(name);
  entry.served = std::move(served);
  entry.ready = true;
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
  if (it->second.served) return it->second.served;
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
    if (entry.ready) index.back().tier = entry.tier;
  }
  return index;
}

absl::StatusOr<ModelStatus> FakeModelManager::Status(const std::string& name) {
  for (const ModelStatus& status : Index()) {
    if (status.name == name) return status;
  }
  return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
}

absl::Status FakeModelManager::MoveTo(const std::string& name,
                                      casting::WeightTier tier) {
  absl::MutexLock lock(&mutex_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  if (!it->second.ready) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", name, " is not READY"));
  }
  it->second.tier = tier;
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>
FakeModelManager::ReadyModels() {
  absl::MutexLock lock(&mutex_);
  std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>> ready;
  for (const auto& [name, entry] : models_) {
    if (!entry.ready) continue;
    ready.emplace_back(name, entry.served
                                 ? entry.served
                                 : std::shared_ptr<ServedModel>(entry.model));
  }
  return ready;
}

}  // namespace castserve::testing
