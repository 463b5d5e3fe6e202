#include "server/servables/batching/batching_served_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "casting/weight.h"
#include "server/servables/batching/batch_planner.h"
#include "server/servables/batching/instance_runner.h"
#include "server/servables/batching/request_queue.h"
#include "server/servables/model_tier.h"
#include "server/servables/tensor_conversion.h"

namespace castserve {
namespace {

// The tokens of a request's input_ids that are not padding (attention_mask
// 1), over its whole batch; -1 for a model without input_ids.
int64_t PromptTokens(const models::NamedTensors& inputs) {
  auto ids = inputs.find("input_ids");
  if (ids == inputs.end()) return -1;
  auto mask = inputs.find("attention_mask");
  if (mask == inputs.end()) return ids->second.numel();
  return mask->second.ne(0).sum().item<int64_t>();
}

// Names, dtypes and non-batch dimensions: what must match for requests to
// join.
std::string BatchKeyOf(const models::NamedTensors& inputs) {
  std::string key;
  for (const auto& [name, tensor] : inputs) {
    const std::vector<int64_t> sizes(tensor.sizes().begin() + 1,
                                     tensor.sizes().end());
    absl::StrAppend(&key, name, ":", static_cast<int>(tensor.scalar_type()),
                    ":", tensor.device().str(), "[", absl::StrJoin(sizes, ","),
                    "];");
  }
  return key;
}

// The sum over the model's weights of `of(weight)`.
template <typename Total, typename Of>
Total SumOverWeights(models::Module& root, Of of) {
  Total total;
  root.Visit([&total, &of](models::Module& module) {
    for (const auto& [name, weight] : module.weights()) total += of(*weight);
  });
  return total;
}

}  // namespace

// ---------------------------------------------------------------------------
// BatchingServedModel::Impl: the queue, the planner, the instances and the
// statistics recorder of one model, and what a request goes through between
// them (the wire decode before the queue; response, record and callback
// after it).

class BatchingServedModel::Impl final : public ServedModel {
 public:
  Impl(inference::ModelConfig config, std::shared_ptr<models::Model> model,
       std::unique_ptr<TrackedModelId> tracked_id, int intra_op_threads,
       std::shared_ptr<const models::Cancellation> cancellation,
       std::shared_ptr<const TextInput> text,
       std::vector<TensorSpec> wire_inputs,
       std::vector<TensorSpec> wire_outputs)
      : tracked_id_(std::move(tracked_id)),
        model_(std::move(model)),
        text_(std::move(text)),
        config_(std::move(config)),
        wire_inputs_(std::move(wire_inputs)),
        wire_outputs_(std::move(wire_outputs)),
        planner_(BatchPlanner::OptionsFromConfig(config_)),
        queue_(RequestQueue::OptionsFromConfig(config_)),
        runner_(model_, {InstanceCount(config_), intra_op_threads,
                         tracked_id_ ? tracked_id_->id() : "",
                         TrackedModelId::HasDeviceBytes(model_->device()),
                         std::move(cancellation)}) {}

  // Starts the instance threads and the reaper; each holds `self`.
  void Start(const std::shared_ptr<Impl>& self);
  // Fails the queued requests, then joins the threads (detaching the
  // calling one if it is a worker: it exits once its callback returns).
  void Stop();

  void Enqueue(InferenceRequest request,
               std::function<void(InferenceResult)> done);
  absl::Status Warmup(const models::NamedTensors& inputs) const {
    return runner_.Warmup(inputs);
  }

  const models::Model& model() const { return *model_; }

  // ServedModel.
  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override {
    return wire_inputs_;
  }
  const std::vector<TensorSpec>& outputs() const override {
    return wire_outputs_;
  }
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;
  int64_t pending_requests() const override {
    return queue_.pending_requests();
  }
  ServedModelStatistics statistics() const override {
    return recorder_.snapshot();
  }
  casting::Footprint footprint() const override;
  ServedModelActivity activity() const override;
  int64_t tracked_bytes() const override {
    return tracked_id_ ? tracked_id_->live_bytes() + device_bytes() : 0;
  }
  casting::Device device() const override { return model_->device(); }
  int64_t device_bytes() const override {
    return tracked_id_ ? tracked_id_->device_live_bytes(device()) : 0;
  }
  casting::WeightTier tier() const override { return tier_.tier(); }
  absl::Status MoveTo(casting::WeightTier tier,
                      std::shared_ptr<const void>* released) override {
    return tier_.MoveTo(tier, released);
  }
  PromotionTiming last_promotion() const override {
    return tier_.last_promotion();
  }

 private:
  // Writes the response (InferenceRequest::write_response), counts the
  // request in the statistics, then runs `queued->done` with `result`.
  void Complete(QueuedPtr queued, InferenceResult result, bool was_running);

  // Declared first so that it is released last: the model's frees are
  // credited to it.
  const std::unique_ptr<TrackedModelId> tracked_id_;
  const std::shared_ptr<models::Model> model_;
  ModelTier tier_{model_.get()};
  // Null without a tokenizer.
  const std::shared_ptr<const TextInput> text_;
  const inference::ModelConfig config_;
  // The model's signature in wire terms.
  const std::vector<TensorSpec> wire_inputs_;
  const std::vector<TensorSpec> wire_outputs_;
  const BatchPlanner planner_;
  RequestQueue queue_;
  ModelStatisticsRecorder recorder_;
  InstanceRunner runner_;
};

void BatchingServedModel::Impl::Start(const std::shared_ptr<Impl>& self) {
  runner_.Start(
      &queue_, &planner_,
      [this](QueuedPtr queued, InferenceResult result, bool was_running) {
        Complete(std::move(queued), std::move(result), was_running);
      },
      [this](int64_t items, absl::Duration compute, int64_t peak_bytes) {
        recorder_.RecordBatch(items, compute, peak_bytes);
      },
      self);
}

void BatchingServedModel::Impl::Stop() {
  runner_.Reject(queue_.Stop());
  runner_.Join();
}

void BatchingServedModel::Impl::Enqueue(
    InferenceRequest request, std::function<void(InferenceResult)> done) {
  // Checked where the request entered (Infer, or the caller's CheckInputs).
  ABSL_RAW_CHECK(&request.inputs.model() == model_.get(),
                 "inputs checked by another model");
  const int64_t max_batch_size = planner_.options().max_batch_size;
  ABSL_RAW_CHECK(
      request.batch_size >= 1 &&
          (max_batch_size <= 0 || request.batch_size <= max_batch_size),
      "batch size outside [1, max_batch_size]");
  auto queued = std::make_unique<QueuedRequest>();
  queued->done = std::move(done);
  queued->deadline = request.deadline;
  queued->is_cancelled = std::move(request.is_cancelled);
  queued->batch_size = request.batch_size;
  if (planner_.options().joins) {
    queued->batch_key = BatchKeyOf(request.inputs.tensors());
  }
  queued->request = std::make_unique<InferenceRequest>(std::move(request));
  absl::Status refused = queue_.Push(queued);
  if (refused.ok()) return;
  InferenceResult result;
  result.outputs = std::move(refused);
  Complete(std::move(queued), std::move(result), /*was_running=*/false);
}

void BatchingServedModel::Impl::Infer(InferenceCall call,
                                      std::function<void(absl::Status)> done) {
  const inference::ModelInferRequest* wire = call.request;
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(*wire, model_->inputs(), model_->outputs(),
                    planner_.options().max_batch_size, text_.get());
  absl::StatusOr<models::CheckedInputs> checked =
      decoded.ok() ? model_->CheckLimits(std::move(decoded->inputs))
                   : decoded.status();
  if (!checked.ok()) {
    // Refused before it was queued: counted once, with no durations.
    recorder_.RecordRequest({checked.status().code()}, queue_.clock().Now());
    return done(checked.status());
  }
  const int64_t prompt_tokens = PromptTokens(checked->tensors());
  InferenceRequest request(*std::move(checked));
  request.batch_size = decoded->batch_size;
  request.requested_outputs = decoded->requested_outputs;
  request.deadline = call.deadline;
  request.is_cancelled = std::move(call.is_cancelled);
  request.write_response = [this, wire, response = call.response,
                            max_bytes = call.max_response_bytes, prompt_tokens,
                            requested = std::move(decoded->requested_outputs)](
                               const models::NamedTensors& outputs) {
    absl::Status written = FillResponseWithin(
        *wire, model_->outputs(), requested, outputs, max_bytes, response);
    if (written.ok() && prompt_tokens >= 0) {
      (*response->mutable_parameters())[kPromptTokensParameter].set_int64_param(
          prompt_tokens);
    }
    return written;
  };
  Enqueue(std::move(request), [done = std::move(done)](InferenceResult result) {
    done(result.outputs.status());
  });
}

void BatchingServedModel::Impl::Complete(QueuedPtr queued,
                                         InferenceResult result,
                                         bool was_running) {
  if (result.outputs.ok() && queued->request->write_response) {
    absl::Status written = queued->request->write_response(*result.outputs);
    if (!written.ok()) result.outputs = std::move(written);
  }
  // The queue's clock: enqueue_time is one of its times.
  const absl::Time now = queue_.clock().Now();
  recorder_.RecordRequest({result.outputs.status().code(), queued->batch_size,
                           result.queue_duration, result.compute_duration,
                           now - queued->enqueue_time},
                          now);
  // `done` may drop the last reference to the served model; `this` stays
  // alive through the calling thread's own reference.
  std::function<void(InferenceResult)> done = std::move(queued->done);
  queued.reset();
  done(std::move(result));
  // Only once the callback and what it captured (possibly the model) are gone
  // does the request stop counting as pending: an Unload waiting for no
  // pending requests then frees the model's memory before it returns.
  done = nullptr;
  if (was_running) queue_.FinishRunning();
}

casting::Footprint BatchingServedModel::Impl::footprint() const {
  return ModelFootprint(*model_);
}

ServedModelActivity BatchingServedModel::Impl::activity() const {
  return ModelActivity(*model_, tracked_id_.get());
}

// ---------------------------------------------------------------------------
// BatchingServedModel

casting::Footprint ModelFootprint(models::Model& model) {
  return SumOverWeights<casting::Footprint>(
      model.root(),
      [](const casting::Weight& weight) { return weight.footprint(); });
}

ServedModelActivity ModelActivity(models::Model& model,
                                  const TrackedModelId* tracked_id) {
  const casting::WeightActivity weights =
      SumOverWeights<casting::WeightActivity>(
          model.root(),
          [](const casting::Weight& weight) { return weight.activity(); });
  ServedModelActivity activity;
  activity.storage = {weights.storage_materializations, weights.storage_bytes,
                      weights.storage_time};
  activity.compute = {weights.compute_materializations, weights.compute_bytes,
                      weights.compute_time};
  activity.transient_compute_bytes = weights.transient_compute_bytes;
  activity.prefetch = model.prefetch_counts();
  activity.peak_tracked_bytes = tracked_id ? tracked_id->peak_bytes() : 0;
  activity.peak_device_bytes =
      tracked_id ? tracked_id->device_peak_bytes(model.device()) : 0;
  return activity;
}

int InstanceCount(const inference::ModelConfig& config) {
  if (config.instance_group_size() == 0) return 1;
  int64_t count = 0;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    count += std::max(group.count(), 1);
  }
  return static_cast<int>(
      std::min<int64_t>(count, std::numeric_limits<int>::max()));
}

absl::StatusOr<std::unique_ptr<BatchingServedModel>>
BatchingServedModel::Create(
    inference::ModelConfig config, std::shared_ptr<models::Model> model,
    std::unique_ptr<TrackedModelId> tracked_id, int intra_op_threads,
    std::shared_ptr<const models::Cancellation> cancellation,
    std::shared_ptr<const TextInput> text) {
  if (model == nullptr) {
    return absl::InvalidArgumentError("BatchingServedModel needs a model");
  }
  if (config.max_batch_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size ", config.max_batch_size(), " is negative"));
  }
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group count ", group.count(), " is negative"));
    }
  }
  std::vector<TensorSpec> wire_inputs = WireSpecs(model->inputs());
  if (text != nullptr && text->available()) {
    wire_inputs.push_back(TextInput::WireSpec());
  }
  if (text != nullptr && text->pairs()) {
    for (TensorSpec spec : TextInput::PairWireSpecs()) {
      wire_inputs.push_back(std::move(spec));
    }
  }
  std::vector<TensorSpec> wire_outputs = WireSpecs(model->outputs());
  auto impl = std::make_shared<Impl>(
      std::move(config), std::move(model), std::move(tracked_id),
      intra_op_threads, std::move(cancellation), std::move(text),
      std::move(wire_inputs), std::move(wire_outputs));
  impl->Start(impl);
  return absl::WrapUnique(new BatchingServedModel(std::move(impl)));
}

BatchingServedModel::BatchingServedModel(std::shared_ptr<Impl> impl)
    : ServedModelHandle(std::move(impl)) {}

BatchingServedModel::~BatchingServedModel() { impl().Stop(); }

BatchingServedModel::Impl& BatchingServedModel::impl() const {
  return static_cast<Impl&>(*body_);
}

absl::Status BatchingServedModel::Warmup(const models::NamedTensors& inputs) {
  return impl().Warmup(inputs);
}

const models::Model& BatchingServedModel::model() const {
  return impl().model();
}

void BatchingServedModel::Enqueue(InferenceRequest request,
                                  std::function<void(InferenceResult)> done) {
  impl().Enqueue(std::move(request), std::move(done));
}

}  // namespace castserve
