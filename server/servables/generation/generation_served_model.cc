#include "server/servables/generation/generation_served_model.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "platform/executor.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/generation/generation_request.h"
#include "server/servables/generation/generation_responses.h"
#include "server/servables/generation/generation_sequence.h"
#include "server/servables/generation/generation_signature.h"
#include "server/servables/generation/generation_statistics.h"
#include "server/servables/model_tier.h"

namespace castserve {
namespace {

static_assert(kMaxGenerationTokens == models::kMaxNewTokens,
              "the config's and the engine's token limits are one limit");

// The served model whose engine callback runs on this thread now: its
// destructor must not stop (join) the engine from here.
thread_local const void* callback_of = nullptr;

}  // namespace

class GenerationServedModel::Impl final : public ServedModel {
 public:
  Impl(GenerationModelParts parts, GenerationSignature signature)
      : tracked_id_(std::move(parts.tracked_id)),
        model_(std::move(parts.model)),
        tokenizer_(std::move(parts.tokenizer)),
        chat_(tokenizer_ != nullptr ? std::move(parts.chat) : nullptr),
        config_(std::move(parts.config)),
        signature_(std::move(signature)),
        limits_{&signature_.inputs,
                &signature_.outputs,
                tokenizer_.get(),
                chat_.get(),
                parts.vocab_size,
                parts.max_positions,
                config_.generation().default_max_tokens(),
                std::move(parts.eos_token_ids)},
        statistics_(parts.clock != nullptr ? *parts.clock
                                           : platform::Clock::Real()),
        cancellation_(std::move(parts.cancellation)),
        engine_(std::move(parts.engine)) {}

  ~Impl() override { engine_->Stop(); }

  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override {
    return signature_.inputs;
  }
  const std::vector<TensorSpec>& outputs() const override {
    return signature_.outputs;
  }
  int64_t pending_requests() const override { return pending_.load(); }
  ServedModelStatistics statistics() const override {
    return statistics_.snapshot();
  }
  casting::Footprint footprint() const override {
    return model_ ? ModelFootprint(*model_) : casting::Footprint();
  }
  int64_t tracked_bytes() const override {
    const models::SchedulerStats stats = engine_->stats();
    // The blocks not allocated are reserved, but for a cool model: its
    // promotion reserves them again.
    const int64_t reserved_bytes =
        tier() == casting::WeightTier::kCool
            ? 0
            : std::max<int64_t>(
                  stats.pool_capacity_bytes - stats.kv_bytes_allocated, 0);
    const int64_t measured_bytes =
        tracked_id_ ? tracked_id_->live_bytes() + device_bytes()
                    : stats.kv_bytes_allocated;
    return measured_bytes + reserved_bytes;
  }
  casting::Device device() const override {
    return model_ ? model_->device() : casting::Device::Cpu();
  }
  int64_t device_bytes() const override {
    return tracked_id_ ? tracked_id_->device_live_bytes(device()) : 0;
  }
  casting::WeightTier tier() const override { return tier_.tier(); }
  // Between two steps of the running sequences (each step holds a
  // ForwardPass); their KV blocks stay. The cool tier keeps no KV block
  // that no sequence holds: neither those unheld at the move nor those the
  // running sequences give back later.
  absl::Status MoveTo(casting::WeightTier tier,
                      std::shared_ptr<const void>* released) override {
    absl::Status moved = tier_.MoveTo(tier, released);
    if (moved.ok()) {
      engine_->KeepUnheldBlocks(tier != casting::WeightTier::kCool);
    }
    return moved;
  }
  PromotionTiming last_promotion() const override {
    return tier_.last_promotion();
  }
  ServedModelActivity activity() const override {
    ServedModelActivity activity;
    if (model_) activity = ModelActivity(*model_, tracked_id_.get());
    const models::SchedulerStats stats = engine_->stats();
    activity.kv_cache = ServedModelActivity::KvCache{
        stats.kv_bytes_in_use, stats.kv_bytes_peak,
        stats.prefix_cache_hit_tokens, stats.prefix_cache_miss_tokens,
        stats.prefix_cache_bytes};
    return activity;
  }

 private:
  using SequencePtr = std::shared_ptr<GenerationSequence>;

  void Submit(SequencePtr sequence, models::CheckedGeneration generation);

  bool OnToken(GenerationSequence& sequence, int64_t token);
  // With logprobs asked and a tokenizer: the text of `token` and of its top
  // ids, each decoded alone (as vLLM's logprobs give them).
  absl::Status AddTokenTexts(GenerationSequence& sequence, int64_t token) const;
  void OnDone(SequencePtr sequence,
              absl::StatusOr<models::GenerationResult> result);
  // Counts the request, then runs its `done` (which may drop the last
  // reference to this model).
  void Finish(GenerationSequence& sequence, absl::Status status);

  // Declared first so that it is released last: the model's and the pool's
  // frees are credited to it.
  const std::unique_ptr<TrackedModelId> tracked_id_;
  const std::shared_ptr<models::Model> model_;
  ModelTier tier_{model_.get()};
  const std::shared_ptr<const text::Tokenizer> tokenizer_;
  const std::shared_ptr<const ChatPrompt> chat_;
  const inference::ModelConfig config_;
  const GenerationSignature signature_;
  // What DecodeGenerationRequest checks a request against.
  const GenerationLimits limits_;
  GenerationStatistics statistics_;
  std::atomic<int64_t> pending_{0};
  const std::shared_ptr<const models::Cancellation> cancellation_;
  // Declared last: destroyed (stopped) first, before what it runs on.
  const std::unique_ptr<GenerationEngine> engine_;
};

void GenerationServedModel::Impl::Infer(
    InferenceCall call, std::function<void(absl::Status)> done) {
  auto sequence = std::make_shared<GenerationSequence>();
  statistics_.Arrived(*sequence);
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
  const models::GenerationOptions& options = checked->generation.options();
  sequence->max_new_tokens = options.max_new_tokens;
  sequence->prompt_tokens =
      static_cast<int64_t>(checked->generation.prompt().size());
  sequence->end_ids = options.eos_token_ids;
  sequence->end_ids.insert(sequence->end_ids.end(),
                           options.stop_token_ids.begin(),
                           options.stop_token_ids.end());
  if (sequence->text) {
    sequence->text_stream.emplace(tokenizer_.get(), sequence->parameters.stop);
  }
  Submit(std::move(sequence), std::move(checked->generation));
}

void GenerationServedModel::Impl::Submit(SequencePtr sequence,
                                         models::CheckedGeneration generation) {
  models::SequenceRequest request(std::move(generation));
  request.deadline = sequence->call.deadline;
  request.is_cancelled = [call = sequence->call.is_cancelled,
                          model = cancellation_] {
    return (model != nullptr && model->cancelled()) || (call && call());
  };
  GenerationSequence* raw = sequence.get();
  request.on_token = [this, raw](int64_t token) {
    return OnToken(*raw, token);
  };
  if (raw->logprobs_asked()) {
    request.on_logprobs = [raw](const models::TokenLogprobs& logprobs) {
      raw->logprobs.push_back(logprobs);
    };
  }
  // Holds the sequence until the engine is done with the request.
  request.on_done = [this, sequence = std::move(sequence)](
                        absl::StatusOr<models::GenerationResult> result) {
    OnDone(sequence, std::move(result));
  };
  engine_->Submit(std::move(request));
}

bool GenerationServedModel::Impl::OnToken(GenerationSequence& sequence,
                                          int64_t token) {
  statistics_.Token(sequence);
  sequence.tokens.push_back(token);
  if (absl::Status texts = AddTokenTexts(sequence, token); !texts.ok()) {
    sequence.text_error = texts;
    return false;
  }
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
      TokenResponse(sequence, absl::MakeConstSpan(&token, 1),
                    sequence.text ? &piece : nullptr);
  if (!more || sequence.EndsWith(token)) {
    sequence.held = std::move(response);  // The final one, in OnDone.
  } else {
    sequence.call.partial_response(std::move(response));
  }
  return more;
}

absl::Status GenerationServedModel::Impl::AddTokenTexts(
    GenerationSequence& sequence, int64_t token) const {
  if (!sequence.logprobs_asked() || tokenizer_ == nullptr ||
      sequence.logprobs.size() != sequence.tokens.size()) {
    return absl::OkStatus();  // A missing entry fails the request at its end.
  }
  auto alone = [&](int64_t id,
                   std::vector<std::string>& texts) -> absl::Status {
    absl::StatusOr<std::string> text =
        tokenizer_->Decode({id}, /*skip_special_tokens=*/false);
    if (!text.ok()) return text.status();
    texts.push_back(*std::move(text));
    return absl::OkStatus();
  };
  if (absl::Status status = alone(token, sequence.token_texts); !status.ok()) {
    return status;
  }
  for (int64_t id : sequence.logprobs.back().top_ids) {
    if (absl::Status status = alone(id, sequence.top_token_texts);
        !status.ok()) {
      return status;
    }
  }
  // top_logprobs texts per token, whatever the vocabulary's size.
  sequence.top_token_texts.resize(sequence.token_texts.size() *
                                  sequence.parameters.sampling.top_logprobs);
  return absl::OkStatus();
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
  if (status.ok()) status = WriteFinalResponse(*sequence, *result);
  callback_of = static_cast<const ServedModel*>(this);
  Finish(*sequence, status);
  callback_of = nullptr;
}

void GenerationServedModel::Impl::Finish(GenerationSequence& sequence,
                                         absl::Status status) {
  statistics_.Ended(sequence, status.code());
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
  GenerationSignature signature =
      GenerationSignatureOf(/*text=*/parts.tokenizer != nullptr,
                            /*chat=*/parts.chat != nullptr);
  inference::ModelConfig& config = parts.config;
  *config.mutable_generation() = WithGenerationDefaults(config.generation());
  config.set_max_batch_size(0);
  config.mutable_model_transaction_policy()->set_decoupled(true);
  if (config.platform().empty()) config.set_platform(kDefaultPlatform);
  if (config.backend().empty()) config.set_backend(kDefaultBackend);
  if (absl::Status valid = ApplyGenerationSignature(signature, config);
      !valid.ok()) {
    return valid;
  }
  return absl::WrapUnique(new GenerationServedModel(
      std::make_shared<Impl>(std::move(parts), std::move(signature))));
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
