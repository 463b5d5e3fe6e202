#include "server/servables/generation/generation_served_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "platform/executor.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/generation/generation_parameters.h"
#include "server/servables/generation/generation_text.h"
#include "server/servables/tensor_conversion.h"
#include "text/unicode/unicode.h"

namespace castserve {
namespace {

static_assert(kMaxGenerationTokens == models::kMaxNewTokens,
              "the config's and the engine's token limits are one limit");

// The served model whose engine callback runs on this thread now: its
// destructor must not stop (join) the engine from here.
thread_local const void* callback_of = nullptr;

std::vector<TensorSpec> WireInputs(bool text) {
  std::vector<TensorSpec> inputs;
  if (text) inputs.push_back({kTextInputTensor, "BYTES", {1}, true});
  inputs.push_back({kInputIdsTensor, "INT64", {-1}, true});
  return inputs;
}

std::vector<TensorSpec> WireOutputs(bool text) {
  std::vector<TensorSpec> outputs;
  if (text) outputs.push_back({kTextOutputTensor, "BYTES", {1}, false});
  outputs.push_back({kOutputIdsTensor, "INT64", {-1}, false});
  return outputs;
}

inference::DataType ConfigTypeOf(const TensorSpec& spec) {
  return spec.datatype == "BYTES" ? inference::TYPE_STRING
                                  : inference::TYPE_INT64;
}

// Fills the signature into `config` when it lists none; otherwise every
// listed tensor must be one of `specs`, with its type and dims.
template <typename ConfigTensors>
absl::Status ApplyGenerationSignature(const std::vector<TensorSpec>& specs,
                                      absl::string_view kind,
                                      ConfigTensors* listed) {
  if (listed->empty()) {
    for (const TensorSpec& spec : specs) {
      auto* tensor = listed->Add();
      tensor->set_name(spec.name);
      tensor->set_data_type(ConfigTypeOf(spec));
      tensor->mutable_dims()->Add(spec.shape.begin(), spec.shape.end());
      if constexpr (std::is_same_v<ConfigTensors,
                                   google::protobuf::RepeatedPtrField<
                                       inference::ModelInput>>) {
        tensor->set_optional(spec.optional);
      }
    }
    return absl::OkStatus();
  }
  for (const auto& tensor : *listed) {
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const auto& s) {
      return s.name == tensor.name();
    });
    if (spec == specs.end() || tensor.data_type() != ConfigTypeOf(*spec) ||
        !std::equal(tensor.dims().begin(), tensor.dims().end(),
                    spec->shape.begin(), spec->shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config ", kind, " ", tensor.name(), " is not one of the generation ",
          kind, "s (",
          absl::StrJoin(specs, ", ",
                        [](std::string* out, const TensorSpec& s) {
                          absl::StrAppend(out, s.name, " ", s.datatype, " [",
                                          absl::StrJoin(s.shape, ","), "]");
                        }),
          ")"));
    }
  }
  return absl::OkStatus();
}

// One BYTES element, length-prefixed as raw contents carry it.
std::string RawBytesElement(absl::string_view bytes) {
  std::string raw(4, '\0');
  const auto length = static_cast<uint32_t>(bytes.size());
  std::memcpy(raw.data(), &length, 4);
  raw.append(bytes.data(), bytes.size());
  return raw;
}

void SetParameter(inference::ModelInferResponse& response,
                  const std::string& name, bool value) {
  (*response.mutable_parameters())[name].set_bool_param(value);
}

}  // namespace

// ---------------------------------------------------------------------------
// One request's sequence: what its callbacks build between the engine's
// tokens and the final response. Used on the step thread only once
// submitted.

struct GenerationSequence {
  InferenceCall call;
  std::function<void(absl::Status)> done;
  GenerationParameters parameters;
  std::vector<std::string> requested_outputs;  // Empty: all.
  bool text = false;
  std::optional<GenerationText> text_stream;
  std::vector<int64_t> tokens;
  std::string whole_text;  // Unary: every piece.
  // Streaming: the response of the token that ends the sequence, which
  // becomes the final one once the engine is done.
  std::optional<inference::ModelInferResponse> held;
  // What ends the sequence after a token besides a stop string: its count,
  // an EOS or stop id.
  int64_t max_new_tokens = 0;
  std::vector<int64_t> end_ids;
  absl::Time arrival;
  absl::Time last_token;
  absl::Status text_error;

  bool Wants(absl::string_view output) const {
    return requested_outputs.empty() ||
           std::find(requested_outputs.begin(), requested_outputs.end(),
                     output) != requested_outputs.end();
  }
};

// ---------------------------------------------------------------------------

class GenerationServedModel::Impl final : public ServedModel {
 public:
  Impl(GenerationModelParts parts, std::vector<TensorSpec> inputs,
       std::vector<TensorSpec> outputs)
      : tracked_id_(std::move(parts.tracked_id)),
        model_(std::move(parts.model)),
        tokenizer_(std::move(parts.tokenizer)),
        config_(std::move(parts.config)),
        vocab_size_(parts.vocab_size),
        max_positions_(parts.max_positions),
        eos_token_ids_(std::move(parts.eos_token_ids)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        limits_{&inputs_,         &outputs_,
                tokenizer_.get(), vocab_size_,
                max_positions_,   config_.generation().default_max_tokens(),
                eos_token_ids_},
        cancellation_(std::move(parts.cancellation)),
        engine_(std::move(parts.engine)) {}

  ~Impl() override { engine_->Stop(); }

  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  int64_t pending_requests() const override { return pending_.load(); }
  ServedModelStatistics statistics() const override {
    return recorder_.snapshot();
  }
  casting::Footprint footprint() const override {
    return model_ ? ModelFootprint(*model_) : casting::Footprint();
  }
  int64_t tracked_bytes() const override {
    const models::SchedulerStats stats = engine_->stats();
    // Blocks are allocated when first taken and kept: the pool has
    // allocated its peak so far; the rest is reserved.
    const int64_t reserved_bytes =
        std::max<int64_t>(stats.pool_capacity_bytes - stats.kv_bytes_peak, 0);
    const int64_t measured_bytes =
        tracked_id_ ? tracked_id_->live_bytes() + device_bytes()
                    : stats.kv_bytes_peak;
    return measured_bytes + reserved_bytes;
  }
  casting::Device device() const override {
    return model_ ? model_->device() : casting::Device::Cpu();
  }
  int64_t device_bytes() const override {
    return tracked_id_ ? tracked_id_->device_live_bytes(device()) : 0;
  }
  ServedModelActivity activity() const override {
    ServedModelActivity activity;
    if (model_) activity = ModelActivity(*model_, tracked_id_.get());
    const models::SchedulerStats stats = engine_->stats();
    activity.kv_cache = ServedModelActivity::KvCache{stats.kv_bytes_in_use,
                                                     stats.kv_bytes_peak};
    return activity;
  }

 private:
  using SequencePtr = std::shared_ptr<GenerationSequence>;

  void Submit(SequencePtr sequence, std::vector<int64_t> prompt,
              models::GenerationOptions options);

  bool OnToken(GenerationSequence& sequence, int64_t token);
  void OnDone(SequencePtr sequence,
              absl::StatusOr<models::GenerationResult> result);
  absl::Status WriteFinal(GenerationSequence& sequence,
                          const models::GenerationResult& result);
  inference::ModelInferResponse Response(const GenerationSequence& sequence,
                                         absl::Span<const int64_t> ids,
                                         const std::string* text) const;
  // Counts the request, then runs its `done` (which may drop the last
  // reference to this model).
  void Finish(GenerationSequence& sequence, absl::Status status);

  // Declared first so that it is released last: the model's and the pool's
  // frees are credited to it.
  const std::unique_ptr<TrackedModelId> tracked_id_;
  const std::shared_ptr<models::Model> model_;
  const std::shared_ptr<const text::Tokenizer> tokenizer_;
  const inference::ModelConfig config_;
  const int64_t vocab_size_;
  const int64_t max_positions_;
  const std::vector<int64_t> eos_token_ids_;
  const std::vector<TensorSpec> inputs_;
  const std::vector<TensorSpec> outputs_;
  // What DecodeGenerationRequest checks a request against.
  const GenerationLimits limits_;
  ModelStatisticsRecorder recorder_;
  std::atomic<int64_t> pending_{0};
  const std::shared_ptr<const models::Cancellation> cancellation_;
  // Declared last: destroyed (stopped) first, before what it runs on.
  const std::unique_ptr<GenerationEngine> engine_;
};

void GenerationServedModel::Impl::Infer(
    InferenceCall call, std::function<void(absl::Status)> done) {
  auto sequence = std::make_shared<GenerationSequence>();
  sequence->arrival = absl::Now();
  sequence->text = tokenizer_ != nullptr;
  sequence->call = std::move(call);
  sequence->done = std::move(done);
  ++pending_;
  absl::StatusOr<CheckedGenerationRequest> checked =
      DecodeGenerationRequest(*sequence->call.request, limits_);
  if (checked.ok() && cancellation_ != nullptr && cancellation_->cancelled()) {
    checked = absl::UnavailableError(cancellation_->reason());
  }
  if (!checked.ok()) return Finish(*sequence, checked.status());
  sequence->requested_outputs = std::move(checked->requested_outputs);
  sequence->parameters = std::move(checked->parameters);
  sequence->max_new_tokens = checked->options.max_new_tokens;
  sequence->end_ids = checked->options.eos_token_ids;
  sequence->end_ids.insert(sequence->end_ids.end(),
                           checked->options.stop_token_ids.begin(),
                           checked->options.stop_token_ids.end());
  if (sequence->text) {
    sequence->text_stream.emplace(tokenizer_.get(), sequence->parameters.stop);
  }
  Submit(std::move(sequence), std::move(checked->prompt),
         std::move(checked->options));
}

void GenerationServedModel::Impl::Submit(SequencePtr sequence,
                                         std::vector<int64_t> prompt,
                                         models::GenerationOptions options) {
  models::SequenceRequest request;
  request.prompt = std::move(prompt);
  request.options = std::move(options);
  request.deadline = sequence->call.deadline;
  request.is_cancelled = [call = sequence->call.is_cancelled,
                          model = cancellation_] {
    return (model != nullptr && model->cancelled()) || (call && call());
  };
  GenerationSequence* raw = sequence.get();
  request.on_token = [this, raw](int64_t token) {
    return OnToken(*raw, token);
  };
  // Holds the sequence until the engine is done with the request.
  request.on_done = [this, sequence = std::move(sequence)](
                        absl::StatusOr<models::GenerationResult> result) {
    OnDone(sequence, std::move(result));
  };
  engine_->Submit(std::move(request));
}

bool GenerationServedModel::Impl::OnToken(GenerationSequence& sequence,
                                          int64_t token) {
  const absl::Time now = absl::Now();
  if (sequence.tokens.empty()) {
    recorder_.RecordFirstToken(now - sequence.arrival);
  } else {
    recorder_.RecordNextToken(now - sequence.last_token);
  }
  sequence.last_token = now;
  sequence.tokens.push_back(token);
  std::string piece;
  if (sequence.text_stream) {
    absl::StatusOr<std::string> appended = sequence.text_stream->Append(token);
    if (!appended.ok()) {
      sequence.text_error = appended.status();
      return false;
    }
    piece = *std::move(appended);
  }
  const bool more = !(sequence.text_stream && sequence.text_stream->stopped());
  if (!sequence.call.partial_response) {
    sequence.whole_text += piece;
    return more;
  }
  inference::ModelInferResponse response =
      Response(sequence, absl::MakeConstSpan(&token, 1),
               sequence.text ? &piece : nullptr);
  const bool last =
      !more ||
      static_cast<int64_t>(sequence.tokens.size()) >= sequence.max_new_tokens ||
      std::find(sequence.end_ids.begin(), sequence.end_ids.end(), token) !=
          sequence.end_ids.end();
  if (last) {
    sequence.held = std::move(response);  // The final one, in OnDone.
  } else {
    sequence.call.partial_response(std::move(response));
  }
  return more;
}

void GenerationServedModel::Impl::OnDone(
    SequencePtr sequence, absl::StatusOr<models::GenerationResult> result) {
  absl::Status status = result.status();
  if (absl::IsCancelled(status) && cancellation_ != nullptr &&
      cancellation_->cancelled()) {
    status = absl::UnavailableError(cancellation_->reason());
  }
  if (status.ok() && !sequence->text_error.ok()) {
    status = absl::InternalError(absl::StrCat("a generated token has no text: ",
                                              sequence->text_error.message()));
  }
  if (status.ok()) status = WriteFinal(*sequence, *result);
  callback_of = static_cast<const ServedModel*>(this);
  Finish(*sequence, status);
  callback_of = nullptr;
}

absl::Status GenerationServedModel::Impl::WriteFinal(
    GenerationSequence& sequence, const models::GenerationResult& result) {
  std::string rest;
  if (sequence.text_stream) {
    absl::StatusOr<std::string> flushed = sequence.text_stream->Flush();
    if (!flushed.ok()) return flushed.status();
    rest = *std::move(flushed);
  }
  const bool stop_string =
      sequence.text_stream && sequence.text_stream->stopped();
  const std::string finish_reason =
      !stop_string &&
              result.stop == models::GenerationResult::Stop::kMaxNewTokens
          ? "length"
          : "stop";
  inference::ModelInferResponse final_response;
  if (!sequence.call.partial_response) {
    sequence.whole_text += rest;
    final_response = Response(sequence, result.tokens,
                              sequence.text ? &sequence.whole_text : nullptr);
  } else {
    // Without a held response (the engine ended the sequence on its own)
    // the final one carries no id, only the text held back.
    const bool held = sequence.held.has_value();
    inference::ModelInferResponse last =
        held ? *std::move(sequence.held)
             : Response(sequence, {}, sequence.text ? &rest : nullptr);
    sequence.held.reset();
    if (held && !rest.empty()) {
      for (int i = 0; i < last.outputs_size(); ++i) {
        if (last.outputs(i).name() != kTextOutputTensor) continue;
        std::string& raw = *last.mutable_raw_output_contents(i);
        raw = RawBytesElement(raw.substr(4) + rest);
      }
    }
    if (sequence.parameters.empty_final_response) {
      sequence.call.partial_response(std::move(last));
      last = inference::ModelInferResponse();
      last.set_model_name(sequence.call.request->model_name());
      last.set_model_version("1");
      last.set_id(sequence.call.request->id());
    }
    final_response = std::move(last);
  }
  SetParameter(final_response, "triton_final_response", true);
  (*final_response.mutable_parameters())["finish_reason"].set_string_param(
      finish_reason);
  if (static_cast<int64_t>(final_response.ByteSizeLong()) >
      sequence.call.max_response_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the response has ", final_response.ByteSizeLong(),
        " bytes, above the limit of ", sequence.call.max_response_bytes,
        " (--max-message-bytes)"));
  }
  *sequence.call.response = std::move(final_response);
  return absl::OkStatus();
}

inference::ModelInferResponse GenerationServedModel::Impl::Response(
    const GenerationSequence& sequence, absl::Span<const int64_t> ids,
    const std::string* text) const {
  const inference::ModelInferRequest& request = *sequence.call.request;
  inference::ModelInferResponse response;
  response.set_model_name(request.model_name());
  response.set_model_version("1");
  response.set_id(request.id());
  SetParameter(response, "triton_final_response", false);
  if (text != nullptr && sequence.Wants(kTextOutputTensor)) {
    auto* output = response.add_outputs();
    output->set_name(kTextOutputTensor);
    output->set_datatype("BYTES");
    output->add_shape(1);
    response.add_raw_output_contents(RawBytesElement(*text));
  }
  if (sequence.Wants(kOutputIdsTensor)) {
    auto* output = response.add_outputs();
    output->set_name(kOutputIdsTensor);
    output->set_datatype("INT64");
    output->add_shape(static_cast<int64_t>(ids.size()));
    response.add_raw_output_contents(
        std::string(reinterpret_cast<const char*>(ids.data()),
                    ids.size() * sizeof(int64_t)));
  }
  return response;
}

void GenerationServedModel::Impl::Finish(GenerationSequence& sequence,
                                         absl::Status status) {
  const absl::Time now = absl::Now();
  const absl::Duration total = now - sequence.arrival;
  const bool ran = !sequence.tokens.empty();
  recorder_.RecordRequest({status.code(), ran ? 1 : 0, absl::ZeroDuration(),
                           ran ? total : absl::ZeroDuration(), total},
                          now);
  std::function<void(absl::Status)> done = std::move(sequence.done);
  sequence.done = nullptr;
  sequence.call.partial_response = nullptr;
  done(std::move(status));
  // Only once the callback and what it captured (possibly the model) are
  // gone does the request stop counting as pending (an unload waits for it).
  done = nullptr;
  --pending_;
}

// ---------------------------------------------------------------------------
// GenerationServedModel

absl::StatusOr<std::unique_ptr<GenerationServedModel>>
GenerationServedModel::Create(GenerationModelParts parts) {
  if (parts.engine == nullptr || !parts.config.has_generation() ||
      parts.vocab_size < 1 || parts.max_positions < 2) {
    return absl::InvalidArgumentError(
        "a generation model needs an engine, a generation config, a "
        "vocabulary and a context of 2 positions at least");
  }
  const bool text = parts.tokenizer != nullptr;
  std::vector<TensorSpec> inputs = WireInputs(text);
  std::vector<TensorSpec> outputs = WireOutputs(text);
  inference::ModelConfig& config = parts.config;
  *config.mutable_generation() = WithGenerationDefaults(config.generation());
  config.set_max_batch_size(0);
  config.mutable_model_transaction_policy()->set_decoupled(true);
  if (config.platform().empty()) config.set_platform(kDefaultPlatform);
  if (config.backend().empty()) config.set_backend(kDefaultBackend);
  absl::Status valid =
      ApplyGenerationSignature(inputs, "input", config.mutable_input());
  if (valid.ok()) {
    valid =
        ApplyGenerationSignature(outputs, "output", config.mutable_output());
  }
  if (!valid.ok()) return valid;
  return absl::WrapUnique(new GenerationServedModel(std::make_shared<Impl>(
      std::move(parts), std::move(inputs), std::move(outputs))));
}

GenerationServedModel::GenerationServedModel(std::shared_ptr<Impl> impl)
    : ServedModelHandle(std::move(impl)) {}

GenerationServedModel::~GenerationServedModel() {
  if (callback_of != body_.get()) return;  // The body's destructor stops it.
  // On the engine's step thread (a `done` dropped the last reference): the
  // engine is stopped and joined from another thread, and what its
  // callbacks use lives until then.
  platform::Executor::Default().Schedule([body = std::move(body_)] {});
}

}  // namespace castserve
