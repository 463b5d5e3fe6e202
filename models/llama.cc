#include "models/llama.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"
#include "casting/device_codec.h"
#include "models/attention.h"
#include "models/incremental_decoder.h"
#include "models/matmul.h"
#include "models/model_loader.h"

namespace castserve::models {
namespace {

// "LlamaAttention", "Qwen2MLP", ...: transformers' class names, so that
// skip_modules_classes in a casting policy can name them.
std::string KindPrefix(const std::string& model_type) {
  if (model_type == "mistral") return "Mistral";
  if (model_type == "qwen2") return "Qwen2";
  return "Llama";
}

// One sequence of a decode step: its tokens offset..offset+tokens-1 of the
// step's flattened tokens, its cache, and the bias of its queries over its
// cached and new keys.
struct SequenceSlice {
  SequenceKv* cache = nullptr;
  int64_t offset = 0;
  int64_t tokens = 0;
  at::Tensor bias;
};

// The rotary tables and the attention bias shared by every layer of one
// forward, or (decode steps) the step's sequences, each attending over its
// own cache.
struct DecoderInputs {
  RopeTables rope;
  at::Tensor bias;
  std::vector<SequenceSlice> sequences;  // Empty for a forward.
};

class Attention : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Attention>> Create(
      const std::string& name, const LlamaConfig& config, int64_t layer,
      const WeightFactory& weights) {
    auto attention =
        std::unique_ptr<Attention>(new Attention(name, config, layer));
    const int64_t q_features = config.num_attention_heads * config.head_dim;
    const int64_t kv_features = config.num_key_value_heads * config.head_dim;
    const int64_t hidden = config.hidden_size;
    struct Projection {
      const char* local;
      bool bias;
      int64_t in, out;
      Linear** slot;
    };
    for (const Projection& p : std::vector<Projection>{
             {"q_proj", config.qkv_bias, hidden, q_features, &attention->q_},
             {"k_proj", config.qkv_bias, hidden, kv_features, &attention->k_},
             {"v_proj", config.qkv_bias, hidden, kv_features, &attention->v_},
             {"o_proj", config.o_proj_bias, q_features, hidden,
              &attention->o_}}) {
      absl::StatusOr<std::unique_ptr<Linear>> linear = Linear::Create(
          absl::StrCat(name, ".", p.local), weights, p.in, p.out, p.bias);
      if (!linear.ok()) return linear.status();
      *p.slot = attention->AddChild(*std::move(linear));
    }
    return attention;
  }

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const DecoderInputs& inputs) const {
    ModuleCall call(*this, ctx);
    at::Tensor q =
        ApplyRotary(SplitHeads(q_->Forward(ctx, x), q_heads_), inputs.rope);
    at::Tensor k =
        ApplyRotary(SplitHeads(k_->Forward(ctx, x), kv_heads_), inputs.rope);
    at::Tensor v = SplitHeads(v_->Forward(ctx, x), kv_heads_);
    at::Tensor attended =
        inputs.sequences.empty()
            ? ScaledDotProductAttention(q, k, v, inputs.bias, scale_)
            : AttendPerSequence(q, k, v, inputs.sequences);
    return o_->Forward(ctx, MergeHeads(attended));
  }

 private:
  Attention(const std::string& name, const LlamaConfig& config, int64_t layer)
      : Module(name, KindPrefix(config.model_type) + "Attention"),
        layer_(layer),
        q_heads_(config.num_attention_heads),
        kv_heads_(config.num_key_value_heads),
        scale_(1.0 / std::sqrt(static_cast<double>(config.head_dim))) {}

  // q, k, v [1, heads, total, head_dim] of the step's flattened tokens:
  // each sequence's slice appended to its cache and attending over it;
  // [1, q_heads, total, head_dim].
  at::Tensor AttendPerSequence(
      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
      const std::vector<SequenceSlice>& sequences) const {
    std::vector<at::Tensor> parts;
    parts.reserve(sequences.size());
    for (const SequenceSlice& s : sequences) {
      auto [keys, values] =
          s.cache->Append(layer_, k.narrow(2, s.offset, s.tokens),
                          v.narrow(2, s.offset, s.tokens));
      parts.push_back(ScaledDotProductAttention(q.narrow(2, s.offset, s.tokens),
                                                keys, values, s.bias, scale_));
    }
    return parts.size() == 1 ? parts[0] : at::cat(parts, /*dim=*/2);
  }

  const int64_t layer_;  // Its index in the KV cache.
  const int64_t q_heads_;
  const int64_t kv_heads_;
  const double scale_;
  Linear* q_ = nullptr;
  Linear* k_ = nullptr;
  Linear* v_ = nullptr;
  Linear* o_ = nullptr;
};

// down(act(gate(x)) * up(x)).
class GatedMlp : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<GatedMlp>> Create(
      const std::string& name, const LlamaConfig& config,
      const WeightFactory& weights) {
    auto mlp = std::unique_ptr<GatedMlp>(new GatedMlp(name, config));
    const int64_t hidden = config.hidden_size;
    const int64_t inner = config.intermediate_size;
    struct Projection {
      const char* local;
      int64_t in, out;
      Linear** slot;
    };
    for (const Projection& p :
         std::vector<Projection>{{"gate_proj", hidden, inner, &mlp->gate_},
                                 {"up_proj", hidden, inner, &mlp->up_},
                                 {"down_proj", inner, hidden, &mlp->down_}}) {
      absl::StatusOr<std::unique_ptr<Linear>> linear =
          Linear::Create(absl::StrCat(name, ".", p.local), weights, p.in, p.out,
                         config.mlp_bias);
      if (!linear.ok()) return linear.status();
      *p.slot = mlp->AddChild(*std::move(linear));
    }
    return mlp;
  }

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const {
    ModuleCall call(*this, ctx);
    at::Tensor gated = gate_->ForwardActivated(ctx, x, activation_);
    return down_->Forward(ctx, gated * up_->Forward(ctx, x));
  }

 private:
  GatedMlp(const std::string& name, const LlamaConfig& config)
      : Module(name, KindPrefix(config.model_type) + "MLP"),
        activation_(config.hidden_act) {}

  const Activation activation_;
  Linear* gate_ = nullptr;
  Linear* up_ = nullptr;
  Linear* down_ = nullptr;
};

// RMSNorm `name` over hidden_size with the config's eps.
absl::StatusOr<std::unique_ptr<RMSNorm>> MakeNorm(
    const std::string& name, const LlamaConfig& config,
    const WeightFactory& weights) {
  return RMSNorm::Create(name, weights, config.hidden_size,
                         config.rms_norm_eps);
}

// Pre-norm residual block: x + attn(norm1(x)), then h + mlp(norm2(h)).
class DecoderLayer : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<DecoderLayer>> Create(
      const std::string& name, const LlamaConfig& config, int64_t index,
      const WeightFactory& weights) {
    auto layer = std::unique_ptr<DecoderLayer>(
        new DecoderLayer(name, KindPrefix(config.model_type) + "DecoderLayer"));
    auto input_norm = MakeNorm(name + ".input_layernorm", config, weights);
    if (!input_norm.ok()) return input_norm.status();
    layer->input_norm_ = layer->AddChild(*std::move(input_norm));
    auto attention =
        Attention::Create(name + ".self_attn", config, index, weights);
    if (!attention.ok()) return attention.status();
    layer->attention_ = layer->AddChild(*std::move(attention));
    auto post_norm =
        MakeNorm(name + ".post_attention_layernorm", config, weights);
    if (!post_norm.ok()) return post_norm.status();
    layer->post_norm_ = layer->AddChild(*std::move(post_norm));
    auto mlp = GatedMlp::Create(name + ".mlp", config, weights);
    if (!mlp.ok()) return mlp.status();
    layer->mlp_ = layer->AddChild(*std::move(mlp));
    return layer;
  }

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const DecoderInputs& inputs) const {
    ModuleCall call(*this, ctx);
    at::Tensor h =
        x + attention_->Forward(ctx, input_norm_->Forward(ctx, x), inputs);
    return h + mlp_->Forward(ctx, post_norm_->Forward(ctx, h));
  }

 private:
  using Module::Module;

  RMSNorm* input_norm_ = nullptr;
  Attention* attention_ = nullptr;
  RMSNorm* post_norm_ = nullptr;
  GatedMlp* mlp_ = nullptr;
};

// lm_head with tied embeddings: no weight of its own; multiplies by the
// embedding table inside the embedding module's hooks, so a casting policy
// treats the shared table as the embedding's (one copy, one decision).
class TiedLmHead : public Module {
 public:
  explicit TiedLmHead(const Embedding* embedding)
      : Module("lm_head", "Linear"), embedding_(embedding) {}

  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const {
    ModuleCall call(*this, ctx);
    ModuleCall tied_call(*embedding_, ctx);
    return ProductWithWeight(*embedding_, ctx, "weight", x, at::Tensor());
  }

 private:
  const Embedding* embedding_;
};

class LlamaForCausalLM : public Model, public IncrementalDecoder {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const LlamaConfig& config, const WeightFactory& weights);

  std::string architecture() const override { return config_.model_type; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return root_; }
  casting::Device device() const override { return device_; }
  std::optional<int64_t> max_sequence_length() const override {
    return config_.max_position_embeddings;
  }
  const IncrementalDecoder* incremental_decoder() const override {
    return this;
  }

  KvCacheShape kv_cache_shape() const override {
    return {config_.num_hidden_layers, config_.num_key_value_heads,
            config_.head_dim, inv_freq_.options().dtype(compute_dtype_)};
  }
  int64_t max_positions() const override {
    return config_.max_position_embeddings;
  }
  int64_t vocab_size() const override { return config_.vocab_size; }
  at::Tensor DecodeBatch(ForwardContext& ctx, const at::Tensor& ids,
                         const std::vector<Segment>& segments,
                         bool last_only) const override;

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override;
  NamedTensors ForwardImpl(ForwardContext& ctx,
                           const NamedTensors& inputs) const override;

 private:
  LlamaForCausalLM(const LlamaConfig& config, at::ScalarType compute_dtype,
                   casting::Device device);
  absl::Status Build(const WeightFactory& weights);
  at::Tensor Logits(ForwardContext& ctx, const at::Tensor& input_ids,
                    const at::Tensor& attention_mask) const;
  // Embedding, layers, norm and lm_head for `input_ids` [batch, seq] at
  // `positions` [batch, seq] under `inputs`' bias or sequences (whose
  // rope tables it fills): logits f32 [batch, seq, vocab], or with `rows`
  // defined only those of the tokens at `rows` (int64 indices into the
  // flattened tokens of batch 1): [rows, vocab].
  at::Tensor RunTokens(ForwardContext& ctx, const at::Tensor& input_ids,
                       const at::Tensor& positions, DecoderInputs inputs,
                       const at::Tensor& rows = at::Tensor()) const;

  const LlamaConfig config_;
  const at::ScalarType compute_dtype_;
  const casting::Device device_;
  // On device_.
  const at::Tensor inv_freq_;
  const std::vector<TensorSpec> inputs_;
  const std::vector<TensorSpec> outputs_;
  Module root_;
  Module* backbone_ = nullptr;  // "model"
  Embedding* embed_ = nullptr;
  std::vector<DecoderLayer*> layers_;
  RMSNorm* norm_ = nullptr;
  Linear* lm_head_ = nullptr;           // Untied.
  TiedLmHead* tied_lm_head_ = nullptr;  // Tied.
};

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& config,
                                   at::ScalarType compute_dtype,
                                   casting::Device device)
    : config_(config),
      compute_dtype_(compute_dtype),
      device_(device),
      inv_freq_(casting::ToDevice(RopeInverseFrequencies(config.rope), device)),
      inputs_({{"input_ids", at::kLong, {-1, -1}},
               {"attention_mask", at::kLong, {-1, -1}, /*optional=*/true}}),
      outputs_({{"logits", at::kFloat, {-1, -1, config.vocab_size}}}),
      root_("", KindPrefix(config.model_type) + "ForCausalLM") {}

absl::Status LlamaForCausalLM::Build(const WeightFactory& weights) {
  const std::string prefix = KindPrefix(config_.model_type);
  backbone_ =
      root_.AddChild(std::make_unique<Module>("model", prefix + "Model"));
  auto embed = Embedding::Create("model.embed_tokens", weights,
                                 config_.vocab_size, config_.hidden_size);
  if (!embed.ok()) return embed.status();
  embed_ = backbone_->AddChild(*std::move(embed));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    auto layer = DecoderLayer::Create(absl::StrCat("model.layers.", i), config_,
                                      i, weights);
    if (!layer.ok()) return layer.status();
    layers_.push_back(backbone_->AddChild(*std::move(layer)));
  }
  auto norm = MakeNorm("model.norm", config_, weights);
  if (!norm.ok()) return norm.status();
  norm_ = backbone_->AddChild(*std::move(norm));
  if (config_.tie_word_embeddings) {
    tied_lm_head_ = root_.AddChild(std::make_unique<TiedLmHead>(embed_));
    return absl::OkStatus();
  }
  auto lm_head = Linear::Create("lm_head", weights, config_.hidden_size,
                                config_.vocab_size, /*bias=*/false);
  if (!lm_head.ok()) return lm_head.status();
  lm_head_ = root_.AddChild(*std::move(lm_head));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> LlamaForCausalLM::Create(
    const LlamaConfig& config, const WeightFactory& weights) {
  absl::Status rope = config.rope.Validate();
  if (!rope.ok()) return rope;
  auto model = std::unique_ptr<LlamaForCausalLM>(new LlamaForCausalLM(
      config, weights.compute_scalar_type(), weights.options().device));
  absl::Status built = model->Build(weights);
  if (!built.ok()) return built;
  return model;
}

absl::Status LlamaForCausalLM::ValidateInputs(
    const NamedTensors& inputs) const {
  const at::Tensor& ids = inputs.at("input_ids");
  if (ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'input_ids' has shape [", absl::StrJoin(ids.sizes(), ", "),
        "]; batch and sequence must be non-empty"));
  }
  if (ids.size(1) > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids' has ", ids.size(1),
                     " tokens, more than max_position_embeddings (",
                     config_.max_position_embeddings, ")"));
  }
  const int64_t min_id = ids.min().item<int64_t>();
  const int64_t max_id = ids.max().item<int64_t>();
  if (min_id < 0 || max_id >= config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'input_ids' holds token id ", min_id < 0 ? min_id : max_id,
        ", outside the vocabulary [0, ", config_.vocab_size, ")"));
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

at::Tensor LlamaForCausalLM::Logits(ForwardContext& ctx,
                                    const at::Tensor& input_ids,
                                    const at::Tensor& attention_mask) const {
  const int64_t batch = input_ids.size(0), seq = input_ids.size(1);
  at::Tensor positions = at::arange(seq, input_ids.options().dtype(at::kLong))
                             .expand({batch, seq});
  DecoderInputs inputs;
  inputs.bias = MakeAttentionBias(attention_mask, batch, seq, seq,
                                  /*causal=*/true,
                                  input_ids.options().dtype(compute_dtype_),
                                  config_.sliding_window);
  return RunTokens(ctx, input_ids, positions, std::move(inputs));
}

at::Tensor LlamaForCausalLM::DecodeBatch(ForwardContext& ctx,
                                         const at::Tensor& ids,
                                         const std::vector<Segment>& segments,
                                         bool last_only) const {
  const at::TensorOptions long_options = ids.options().dtype(at::kLong);
  DecoderInputs inputs;
  std::vector<at::Tensor> positions;
  std::vector<int64_t> last_rows;
  int64_t offset = 0;
  for (const Segment& segment : segments) {
    const int64_t n = segment.tokens, start = segment.cache->length();
    positions.push_back(at::arange(start, start + n, long_options));
    // The n queries are the last n of start + n keys.
    at::Tensor bias = MakeAttentionBias(
        at::Tensor(), 1, n, start + n, /*causal=*/true,
        ids.options().dtype(compute_dtype_), config_.sliding_window);
    inputs.sequences.push_back({segment.cache, offset, n, std::move(bias)});
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
                at::cat(positions).view({1, offset}), std::move(inputs), rows);
  for (const Segment& segment : segments) {
    segment.cache->Advance(segment.tokens);
  }
  return last_only ? logits : logits[0];
}

at::Tensor LlamaForCausalLM::RunTokens(ForwardContext& ctx,
                                       const at::Tensor& input_ids,
                                       const at::Tensor& positions,
                                       DecoderInputs inputs,
                                       const at::Tensor& rows) const {
  ModuleCall root_call(root_, ctx);
  at::Tensor hidden;
  {
    ModuleCall backbone_call(*backbone_, ctx);
    hidden = embed_->Forward(ctx, input_ids).to(compute_dtype_);
    RopeTables rope = RopeCosSin(inv_freq_, positions);
    inputs.rope = {rope.cos.to(compute_dtype_), rope.sin.to(compute_dtype_)};
    for (const DecoderLayer* layer : layers_) {
      hidden = layer->Forward(ctx, hidden, inputs);
    }
    // Only the rows asked for need the norm and lm_head.
    if (rows.defined()) hidden = hidden[0].index_select(0, rows);
    hidden = norm_->Forward(ctx, hidden);
  }
  at::Tensor logits = tied_lm_head_ != nullptr
                          ? tied_lm_head_->Forward(ctx, hidden)
                          : lm_head_->Forward(ctx, hidden);
  return logits.to(at::kFloat);
}

NamedTensors LlamaForCausalLM::ForwardImpl(ForwardContext& ctx,
                                           const NamedTensors& inputs) const {
  auto mask = inputs.find("attention_mask");
  return {
      {"logits", Logits(ctx, inputs.at("input_ids"),
                        mask == inputs.end() ? at::Tensor() : mask->second)}};
}

absl::Status ReadRope(const HfConfig& config, LlamaConfig& out) {
  // transformers >= 5 nests theta and scaling in "rope_parameters".
  absl::StatusOr<HfConfig> rope_parameters =
      config.GetObject("rope_parameters");
  const bool nested = rope_parameters.ok();
  const HfConfig& theta_source = nested ? *rope_parameters : config;
  absl::StatusOr<double> theta = theta_source.GetDouble("rope_theta", 10000.0);
  if (!theta.ok()) return theta.status();
  out.rope.theta = *theta;
  out.rope.head_dim = out.head_dim;
  absl::StatusOr<HfConfig> scaling =
      nested ? rope_parameters : config.GetObject("rope_scaling");
  if (!scaling.ok()) {
    return absl::IsNotFound(scaling.status()) ? absl::OkStatus()
                                              : scaling.status();
  }
  absl::StatusOr<std::string> type =
      scaling->GetString("rope_type", scaling->Has("type") ? "" : "default");
  if (type.ok() && type->empty()) type = scaling->GetString("type");
  if (!type.ok()) return type.status();
  absl::Status parsed = ParseRopeType(*type, &out.rope.type);
  if (!parsed.ok()) return parsed;
  if (out.rope.type == RopeType::kDefault) return absl::OkStatus();
  absl::StatusOr<double> factor = scaling->GetDouble("factor");
  if (!factor.ok()) return factor.status();
  out.rope.factor = *factor;
  if (out.rope.type != RopeType::kLlama3) return absl::OkStatus();
  auto low = scaling->GetDouble("low_freq_factor");
  auto high = scaling->GetDouble("high_freq_factor");
  auto original = scaling->GetSize("original_max_position_embeddings");
  for (const absl::Status& s :
       {low.status(), high.status(), original.status()}) {
    if (!s.ok()) return s;
  }
  out.rope.low_freq_factor = *low;
  out.rope.high_freq_factor = *high;
  out.rope.original_max_position_embeddings = *original;
  return out.rope.Validate();
}

// Reads the sizes, range-checked; each one is required unless it has a
// default.
absl::Status ReadSizes(const HfConfig& config, LlamaConfig& out) {
  struct Field {
    const char* key;
    int64_t* value;
  };
  for (const Field& field : std::vector<Field>{
           {"vocab_size", &out.vocab_size},
           {"hidden_size", &out.hidden_size},
           {"intermediate_size", &out.intermediate_size},
           {"num_hidden_layers", &out.num_hidden_layers},
           {"num_attention_heads", &out.num_attention_heads},
           {"max_position_embeddings", &out.max_position_embeddings}}) {
    absl::StatusOr<int64_t> value = config.GetSize(field.key);
    if (!value.ok()) return value.status();
    *field.value = *value;
  }
  auto kv_heads =
      config.GetSize("num_key_value_heads", out.num_attention_heads);
  if (!kv_heads.ok()) return kv_heads.status();
  out.num_key_value_heads = *kv_heads;
  if (out.num_attention_heads % out.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": num_attention_heads (", out.num_attention_heads,
        ") must be a multiple of num_key_value_heads (",
        out.num_key_value_heads, ")"));
  }
  // Without head_dim, transformers splits hidden_size between the heads.
  if (!config.Has("head_dim") &&
      out.hidden_size % out.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.label(), ": hidden_size (", out.hidden_size,
                     ") must be a multiple of num_attention_heads (",
                     out.num_attention_heads, ") when head_dim is not given"));
  }
  auto head_dim =
      config.GetSize("head_dim", out.hidden_size / out.num_attention_heads);
  if (!head_dim.ok()) return head_dim.status();
  out.head_dim = *head_dim;
  return absl::OkStatus();
}

// Biases, tying, activation and the sliding window, per model type.
absl::Status ReadVariant(const HfConfig& config, LlamaConfig& out) {
  auto eps = config.GetDouble("rms_norm_eps", 1e-6);
  auto tie = config.GetBool("tie_word_embeddings", false);
  auto act = config.GetString("hidden_act", "silu");
  if (!eps.ok()) return eps.status();
  if (!tie.ok()) return tie.status();
  if (!act.ok()) return act.status();
  out.rms_norm_eps = *eps;
  out.tie_word_embeddings = *tie;
  absl::StatusOr<Activation> activation = ParseActivation(*act);
  if (!activation.ok()) return activation.status();
  out.hidden_act = *activation;
  if (out.model_type == "qwen2") {
    out.qkv_bias = true;
    auto sliding = config.GetBool("use_sliding_window", false);
    if (!sliding.ok()) return sliding.status();
    if (*sliding) {
      return absl::InvalidArgumentError(absl::StrCat(
          config.label(), ": use_sliding_window is not supported for qwen2"));
    }
    return absl::OkStatus();
  }
  if (out.model_type == "mistral") {
    auto window = config.GetSize("sliding_window", 0);
    if (!window.ok()) return window.status();
    out.sliding_window = *window;
    return absl::OkStatus();
  }
  auto attention_bias = config.GetBool("attention_bias", false);
  auto mlp_bias = config.GetBool("mlp_bias", false);
  if (!attention_bias.ok()) return attention_bias.status();
  if (!mlp_bias.ok()) return mlp_bias.status();
  out.qkv_bias = out.o_proj_bias = *attention_bias;
  out.mlp_bias = *mlp_bias;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> LlamaConfig::FromHf(const HfConfig& config) {
  LlamaConfig out;
  out.model_type = config.model_type();
  const std::vector<std::string> supported(std::begin(kLlamaFamilyModelTypes),
                                           std::end(kLlamaFamilyModelTypes));
  if (std::find(supported.begin(), supported.end(), out.model_type) ==
      supported.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": model_type '", out.model_type,
        "' is not of the llama family (", absl::StrJoin(supported, ", "), ")"));
  }
  absl::Status status = ReadSizes(config, out);
  if (status.ok()) status = ReadVariant(config, out);
  if (status.ok()) status = ReadRope(config, out);
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::unique_ptr<Model>> CreateLlamaForCausalLM(
    const LlamaConfig& config, const WeightFactory& weights) {
  return LlamaForCausalLM::Create(config, weights);
}

absl::StatusOr<std::unique_ptr<Model>> CreateLlamaFamilyModel(
    const HfConfig& config,
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    const WeightPolicyOptions& options) {
  absl::StatusOr<LlamaConfig> llama = LlamaConfig::FromHf(config);
  if (!llama.ok()) return llama.status();
  WeightFactory weights(std::move(checkpoint), options);
  return CreateLlamaForCausalLM(*llama, weights);
}

namespace {
const ArchitectureRegistration kLlama("llama", &CreateLlamaFamilyModel);
const ArchitectureRegistration kMistral("mistral", &CreateLlamaFamilyModel);
const ArchitectureRegistration kQwen2("qwen2", &CreateLlamaFamilyModel);
}  // namespace

}  // namespace castserve::models
