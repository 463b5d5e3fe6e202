#include "models/decoder/decoder_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "c10/util/Exception.h"
#include "casting/device/device_codec.h"
#include "models/decoder/decoder_layer.h"
#include "models/decoder/decoder_norm.h"
#include "models/decoder/rotary_table.h"
#include "models/generation/incremental_decoder.h"
#include "models/kernels/matmul.h"
#include "models/layers/attention.h"
#include "models/layers/layers.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

// lm_head with tied embeddings: no weight of its own; multiplies by the
// embedding table inside the embedding module's hooks, so a casting policy
// treats the shared table as the embedding's (one copy, one decision).
class TiedLmHead : public Module {
 public:
  TiedLmHead(const std::string& name, const Embedding* embedding)
      : Module(name, "Linear"), embedding_(embedding) {}

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const {
    ModuleCall call(*this, ctx);
    ModuleCall tied_call(*embedding_, ctx);
    return ProductWithWeight(*embedding_, ctx, "weight", x, at::Tensor());
  }

  // Above StorageProductMaxRows() rows (prefill) the product takes a compute
  // copy of the whole table, held while it runs.
  const Module* BorrowsWeightsOf() const override { return embedding_; }

 private:
  const Embedding* embedding_;
};

// The distinct attention windows of `spec`'s layers, global (0) included
// only when a layer is global.
std::vector<int64_t> DistinctWindows(const DecoderSpec& spec) {
  std::vector<int64_t> windows;
  for (const DecoderLayerAttention& layer : spec.layers) {
    if (std::find(windows.begin(), windows.end(), layer.sliding_window) ==
        windows.end()) {
      windows.push_back(layer.sliding_window);
    }
  }
  return windows;
}

class DecoderForCausalLM : public Model, public IncrementalDecoder {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const DecoderSpec& spec, const WeightFactory& weights, bool headless);

  std::string architecture() const override { return spec_.model_type; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }
  casting::Device device() const override { return device_; }
  std::optional<int64_t> max_sequence_length() const override {
    return spec_.max_position_embeddings;
  }
  // A backbone alone (no lm_head) serves hidden states, not generation.
  const IncrementalDecoder* incremental_decoder() const override {
    return headless_ ? nullptr : this;
  }

  KvCacheShape kv_cache_shape() const override {
    return {spec_.num_hidden_layers, spec_.num_key_value_heads, spec_.head_dim,
            kv_options_};
  }
  int64_t max_positions() const override {
    return spec_.max_generated_positions > 0 ? spec_.max_generated_positions
                                             : spec_.max_position_embeddings;
  }
  int64_t vocab_size() const override { return spec_.vocab_size; }
  at::Tensor DecodeBatch(ForwardContext& ctx, const at::Tensor& ids,
                         const std::vector<Segment>& segments,
                         bool last_only) const override;

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& ctx,
                           const NamedTensors& inputs) const override;

 private:
  DecoderForCausalLM(const DecoderSpec& spec, at::ScalarType compute_dtype,
                     casting::Device device, bool headless);
  absl::Status Build(const WeightFactory& weights);
  // The biases [batch, 1, queries, keys] of every window.
  std::vector<at::Tensor> Biases(const at::Tensor& key_mask, int64_t batch,
                                 int64_t queries, int64_t keys,
                                 const at::TensorOptions& options) const;
  // Embedding, layers, norm and lm_head for `input_ids` [batch, seq] at
  // `positions` [batch, seq] under `inputs`' biases or sequences (whose
  // rope tables it fills): logits f32 [batch, seq, vocab], or with `rows`
  // defined only those of the tokens at `rows` (int64 indices into the
  // flattened tokens of batch 1): [rows, vocab].
  at::Tensor RunTokens(ForwardContext& ctx, const at::Tensor& input_ids,
                       const at::Tensor& positions, DecoderStepInputs inputs,
                       const at::Tensor& rows = at::Tensor()) const;
  at::Tensor Head(ForwardContext& ctx, const at::Tensor& hidden) const;

  const DecoderSpec spec_;
  // Saved as the backbone alone (Qwen3Model: Qwen3-Embedding): no lm_head,
  // the output is last_hidden_state (after the final norm).
  const bool headless_;
  const at::ScalarType compute_dtype_;
  const casting::Device device_;
  const at::TensorOptions kv_options_;  // Compute dtype, on the device.
  const std::vector<int64_t> windows_;
  std::vector<RotaryTable> ropes_;
  const std::vector<TensorSpec> inputs_;
  const std::vector<TensorSpec> outputs_;
  Module root_;
  Module* backbone_ = nullptr;
  Embedding* embed_ = nullptr;
  std::vector<DecoderLayer*> layers_;
  DecoderNormSlot norm_;
  Linear* lm_head_ = nullptr;           // Untied.
  TiedLmHead* tied_lm_head_ = nullptr;  // Tied.
};

DecoderForCausalLM::DecoderForCausalLM(const DecoderSpec& spec,
                                       at::ScalarType compute_dtype,
                                       casting::Device device, bool headless)
    : spec_(spec),
      headless_(headless),
      compute_dtype_(compute_dtype),
      device_(device),
      kv_options_(casting::ToDevice(at::empty({0}), device)
                      .options()
                      .dtype(compute_dtype)),
      windows_(DistinctWindows(spec)),
      inputs_({{"input_ids", at::kLong, {-1, -1}},
               {"attention_mask", at::kLong, {-1, -1}, /*optional=*/true}}),
      outputs_(
          {headless
               ? TensorSpec{"last_hidden_state",
                            at::kFloat,
                            {-1, -1, spec.hidden_size}}
               : TensorSpec{"logits", at::kFloat, {-1, -1, spec.vocab_size}}}),
      root_("", spec.class_prefix + "ForCausalLM") {
  for (const DecoderRope& rope : spec.ropes) ropes_.emplace_back(rope, device);
}

absl::Status DecoderForCausalLM::Build(const WeightFactory& weights) {
  const DecoderTensorNames& names = spec_.names;
  backbone_ = root_.AddChild(
      std::make_unique<Module>(names.backbone, spec_.class_prefix + "Model"));
  auto embed = Embedding::Create(names.embed, weights, spec_.vocab_size,
                                 spec_.hidden_size);
  if (!embed.ok()) return embed.status();
  embed_ = backbone_->AddChild(*std::move(embed));
  for (int64_t i = 0; i < spec_.num_hidden_layers; ++i) {
    const int window =
        static_cast<int>(std::find(windows_.begin(), windows_.end(),
                                   spec_.layers[i].sliding_window) -
                         windows_.begin());
    auto layer = DecoderLayer::Create(spec_, i, window, weights);
    if (!layer.ok()) return layer.status();
    layers_.push_back(backbone_->AddChild(*std::move(layer)));
  }
  absl::Status status = norm_.Add(*backbone_, names.final_norm, spec_,
                                  spec_.hidden_size, weights);
  if (!status.ok() || headless_) return status;
  if (spec_.tie_word_embeddings) {
    tied_lm_head_ =
        root_.AddChild(std::make_unique<TiedLmHead>(names.lm_head, embed_));
    return absl::OkStatus();
  }
  auto lm_head = Linear::Create(names.lm_head, weights, spec_.hidden_size,
                                spec_.vocab_size, /*bias=*/false);
  if (!lm_head.ok()) return lm_head.status();
  lm_head_ = root_.AddChild(*std::move(lm_head));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> DecoderForCausalLM::Create(
    const DecoderSpec& spec, const WeightFactory& weights, bool headless) {
  absl::Status valid = spec.Validate();
  if (!valid.ok()) return valid;
  auto model = std::unique_ptr<DecoderForCausalLM>(new DecoderForCausalLM(
      spec, weights.compute_scalar_type(), weights.options().device, headless));
  absl::Status built = model->Build(weights);
  if (!built.ok()) return built;
  return model;
}

absl::Status DecoderForCausalLM::ValidateInputs(
    const NamedTensors& inputs) const {
  const at::Tensor& ids = inputs.at("input_ids");
  if (ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'input_ids' has shape [", absl::StrJoin(ids.sizes(), ", "),
        "]; batch and sequence must be non-empty"));
  }
  if (ids.size(1) > spec_.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has ", ids.size(1),
                     " tokens, more than max_position_embeddings (",
                     spec_.max_position_embeddings, ")"));
  }
  const int64_t min_id = ids.min().item<int64_t>();
  const int64_t max_id = ids.max().item<int64_t>();
  if (min_id < 0 || max_id >= spec_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'input_ids' holds token id ", min_id < 0 ? min_id : max_id,
        ", outside the vocabulary [0, ", spec_.vocab_size, ")"));
  }
  auto mask = inputs.find("attention_mask");
  if (mask == inputs.end()) return absl::OkStatus();
  if (mask->second.sizes() != ids.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'attention_mask' has shape [",
        absl::StrJoin(mask->second.sizes(), ", "), "], input_ids has [",
        absl::StrJoin(ids.sizes(), ", "), "]"));
  }
  if (!(mask->second.eq(0) | mask->second.eq(1)).all().item<bool>()) {
    return absl::InvalidArgumentError(
        "input 'attention_mask' must hold only 0 and 1");
  }
  return absl::OkStatus();
}

std::vector<at::Tensor> DecoderForCausalLM::Biases(
    const at::Tensor& key_mask, int64_t batch, int64_t queries, int64_t keys,
    const at::TensorOptions& options) const {
  std::vector<at::Tensor> biases;
  for (int64_t window : windows_) {
    biases.push_back(MakeAttentionBias(key_mask, batch, queries, keys,
                                       /*causal=*/true, options, window));
  }
  return biases;
}

NamedTensors DecoderForCausalLM::ForwardImpl(ForwardContext& ctx,
                                             const NamedTensors& inputs) const {
  const at::Tensor& input_ids = inputs.at("input_ids");
  auto mask = inputs.find("attention_mask");
  const int64_t batch = input_ids.size(0), seq = input_ids.size(1);
  at::Tensor positions = at::arange(seq, input_ids.options().dtype(at::kLong))
                             .expand({batch, seq});
  DecoderStepInputs step;
  step.biases =
      Biases(mask == inputs.end() ? at::Tensor() : mask->second, batch, seq,
             seq, input_ids.options().dtype(compute_dtype_));
  return {{outputs_[0].name,
           RunTokens(ctx, input_ids, positions, std::move(step))}};
}

at::Tensor DecoderForCausalLM::DecodeBatch(ForwardContext& ctx,
                                           const at::Tensor& ids,
                                           const std::vector<Segment>& segments,
                                           bool last_only) const {
  const at::TensorOptions long_options = ids.options().dtype(at::kLong);
  DecoderStepInputs step;
  std::vector<at::Tensor> positions;
  std::vector<int64_t> last_rows;
  int64_t offset = 0;
  for (const Segment& segment : segments) {
    const int64_t n = segment.tokens, start = segment.cache->length();
    positions.push_back(at::arange(start, start + n, long_options));
    DecoderStepInputs::Sequence sequence{segment.cache, offset, n};
    if (start == 0) {
      sequence.keys = DecoderStepInputs::Keys::kOwn;
    } else if (segment.cache->ReadsInPlace()) {
      sequence.keys = DecoderStepInputs::Keys::kBlocks;
    }
    if (sequence.keys != DecoderStepInputs::Keys::kBlocks) {
      // The n queries are the last n of start + n keys.
      sequence.biases = Biases(at::Tensor(), 1, n, start + n,
                               ids.options().dtype(compute_dtype_));
    }
    step.sequences.push_back(std::move(sequence));
    offset += n;
    last_rows.push_back(offset - 1);
  }
  TORCH_CHECK(offset == ids.size(0), "a decode step of ", ids.size(0),
              " ids for segments of ", offset, " tokens");
  at::Tensor rows = last_only
                        ? casting::ToDevice(at::tensor(last_rows), device_)
                        : at::Tensor();
  at::Tensor logits =
      RunTokens(ctx, ids.view({1, offset}),
                at::cat(positions).view({1, offset}), std::move(step), rows);
  for (const Segment& segment : segments) {
    segment.cache->Advance(segment.tokens);
  }
  return last_only ? logits : logits[0];
}

at::Tensor DecoderForCausalLM::RunTokens(ForwardContext& ctx,
                                         const at::Tensor& input_ids,
                                         const at::Tensor& positions,
                                         DecoderStepInputs inputs,
                                         const at::Tensor& rows) const {
  ModuleCall root_call(root_, ctx);
  at::Tensor hidden;
  {
    ModuleCall backbone_call(*backbone_, ctx);
    hidden = embed_->Forward(ctx, input_ids).to(compute_dtype_);
    if (spec_.embedding_scale > 0) {
      // transformers multiplies by the scale in the weights' dtype.
      hidden = hidden * at::scalar_tensor(spec_.embedding_scale,
                                          hidden.options().dtype(at::kFloat))
                            .to(compute_dtype_);
    }
    for (const RotaryTable& rope : ropes_) {
      inputs.ropes.push_back(rope.Tables(positions, compute_dtype_));
    }
    for (const DecoderLayer* layer : layers_) {
      hidden = layer->Forward(ctx, hidden, inputs);
    }
    // Only the rows asked for need the norm and lm_head.
    if (rows.defined()) hidden = hidden[0].index_select(0, rows);
    hidden = norm_.Forward(ctx, hidden);
  }
  return Head(ctx, hidden);
}

at::Tensor DecoderForCausalLM::Head(ForwardContext& ctx,
                                    const at::Tensor& hidden) const {
  if (headless_) return hidden.to(at::kFloat);
  at::Tensor logits = tied_lm_head_ != nullptr
                          ? tied_lm_head_->Forward(ctx, hidden)
                          : lm_head_->Forward(ctx, hidden);
  logits = logits.to(at::kFloat);
  const double cap = spec_.final_logit_softcap;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

struct SpecRegistry {
  absl::Mutex mu;
  std::map<std::string, DecoderSpecReader> readers ABSL_GUARDED_BY(mu);
};

SpecRegistry& GetSpecRegistry() {
  static SpecRegistry* const registry = new SpecRegistry();
  return *registry;
}

// The decoder `spec` describes over `checkpoint`. The backbone saved alone
// (transformers' <Prefix>Model: Qwen3-Embedding) has its keys without the
// backbone's prefix and no lm_head: it builds headless.
absl::StatusOr<std::unique_ptr<Model>> CreateDecoder(
    const DecoderSpec& spec,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  const std::string backbone = spec.names.backbone + ".";
  const std::string embed = spec.names.embed + ".weight";
  const bool headless =
      !spec.names.backbone.empty() && checkpoint->Find(embed) == nullptr &&
      absl::StartsWith(embed, backbone) &&
      checkpoint->Find(embed.substr(backbone.size())) != nullptr;
  WeightFactory weights(std::move(checkpoint), options, "",
                        headless ? backbone : "");
  return DecoderForCausalLM::Create(spec, weights, headless);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateDecoderForCausalLM(
    const DecoderSpec& spec, const WeightFactory& weights) {
  return DecoderForCausalLM::Create(spec, weights, /*headless=*/false);
}

DecoderRegistration::DecoderRegistration(std::string model_type,
                                         DecoderSpecReader read) {
  SpecRegistry& registry = GetSpecRegistry();
  {
    absl::MutexLock lock(&registry.mu);
    registry.readers[model_type] = read;
  }
  ArchitectureTraits traits;
  traits.generates = true;
  // The factory reads the spec with this registration's reader, not the one
  // config.json's model_type names: a model config's `architecture`
  // override (LoadHfModel) chooses the decoder.
  const ArchitectureRegistration registration(
      std::move(model_type),
      [read](const HfConfig& config,
             std::shared_ptr<const casting::Checkpoint> checkpoint,
             const WeightPolicyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Model>> {
        absl::StatusOr<DecoderSpec> spec = read(config);
        if (!spec.ok()) return spec.status();
        return CreateDecoder(*spec, std::move(checkpoint), options);
      },
      traits);
}

absl::StatusOr<DecoderSpec> ReadDecoderSpec(const HfConfig& config) {
  DecoderSpecReader read = nullptr;
  {
    SpecRegistry& registry = GetSpecRegistry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.readers.find(config.model_type());
    if (it != registry.readers.end()) read = it->second;
  }
  if (read == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": model_type '", config.model_type(),
                     "' is not a registered decoder"));
  }
  return read(config);
}

}  // namespace castserve::models
