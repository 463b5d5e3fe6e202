#include "models/decoder/decoder_attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "models/decoder/rotary_table.h"
#include "models/kernels/paged_attention.h"
#include "models/layers/attention.h"

namespace castserve::models {

at::Tensor SoftCappedAttention(const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& bias,
                               double scale, double cap) {
  const int64_t groups = q.size(1) / k.size(1);
  at::Tensor keys = groups == 1 ? k : k.repeat_interleave(groups, 1);
  at::Tensor values = groups == 1 ? v : v.repeat_interleave(groups, 1);
  at::Tensor scores = at::matmul(q, keys.transpose(2, 3)) * scale;
  scores = at::tanh(scores / cap) * cap;
  if (bias.defined()) scores = scores + bias.to(scores.scalar_type());
  at::Tensor weights = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(weights, values);
}

DecoderAttention::DecoderAttention(const std::string& name,
                                   const DecoderSpec& spec, int64_t layer,
                                   int window_index)
    : Module(name, spec.class_prefix + "Attention"),
      layer_(layer),
      window_index_(window_index),
      rope_index_(spec.layers[layer].rope),
      q_heads_(spec.num_attention_heads),
      kv_heads_(spec.num_key_value_heads),
      head_dim_(spec.head_dim),
      scale_(spec.attention_scale > 0
                 ? spec.attention_scale
                 : 1.0 / std::sqrt(static_cast<double>(spec.head_dim))),
      softcap_(spec.attention_softcap),
      sliding_window_(spec.layers[layer].sliding_window) {}

absl::StatusOr<std::unique_ptr<DecoderAttention>> DecoderAttention::Create(
    const std::string& name, const DecoderSpec& spec, int64_t layer,
    int window_index, const WeightFactory& weights) {
  auto attention = std::unique_ptr<DecoderAttention>(
      new DecoderAttention(name, spec, layer, window_index));
  absl::Status status = attention->AddProjections(spec, weights);
  if (!status.ok()) return status;
  return attention;
}

absl::Status DecoderAttention::AddProjections(const DecoderSpec& spec,
                                              const WeightFactory& weights) {
  const DecoderTensorNames& names = spec.names;
  const int64_t q_features = q_heads_ * head_dim_;
  const int64_t kv_features = kv_heads_ * head_dim_;
  const int64_t hidden = spec.hidden_size;
  struct Projection {
    const std::string* local;
    bool bias;
    int64_t in, out;
    Linear** slot;
  };
  std::vector<Projection> projections;
  if (!names.qkv.empty()) {
    projections.push_back({&names.qkv, spec.qkv_bias, hidden,
                           q_features + 2 * kv_features, &qkv_});
  } else {
    projections.push_back({&names.q, spec.qkv_bias, hidden, q_features, &q_});
    projections.push_back({&names.k, spec.qkv_bias, hidden, kv_features, &k_});
    projections.push_back({&names.v, spec.qkv_bias, hidden, kv_features, &v_});
  }
  projections.push_back({&names.o, spec.o_bias, q_features, hidden, &o_});
  for (const Projection& p : projections) {
    absl::StatusOr<std::unique_ptr<Linear>> linear = Linear::Create(
        absl::StrCat(name(), ".", *p.local), weights, p.in, p.out, p.bias);
    if (!linear.ok()) return linear.status();
    *p.slot = AddChild(*std::move(linear));
  }
  const std::string q_norm =
      names.q_norm.empty() ? "" : absl::StrCat(name(), ".", names.q_norm);
  const std::string k_norm =
      names.k_norm.empty() ? "" : absl::StrCat(name(), ".", names.k_norm);
  absl::Status status = q_norm_.Add(*this, q_norm, spec, head_dim_, weights);
  if (!status.ok()) return status;
  return k_norm_.Add(*this, k_norm, spec, head_dim_, weights);
}

std::vector<at::Tensor> DecoderAttention::Project(ForwardContext& ctx,
                                                  const at::Tensor& x) const {
  at::Tensor q, k, v;
  if (qkv_ != nullptr) {
    at::Tensor qkv = qkv_->Forward(ctx, x);
    const int64_t q_features = q_heads_ * head_dim_;
    const int64_t kv_features = kv_heads_ * head_dim_;
    q = qkv.narrow(-1, 0, q_features);
    k = qkv.narrow(-1, q_features, kv_features);
    v = qkv.narrow(-1, q_features + kv_features, kv_features);
  } else {
    q = q_->Forward(ctx, x);
    k = k_->Forward(ctx, x);
    v = v_->Forward(ctx, x);
  }
  // [batch, seq, heads * dim] -> [batch, seq, heads, dim], normed per head,
  // -> [batch, heads, seq, dim].
  auto heads = [&](const at::Tensor& t, int64_t count,
                   const DecoderNormSlot* norm) {
    at::Tensor split = t.reshape({t.size(0), t.size(1), count, head_dim_});
    if (norm != nullptr) split = norm->Forward(ctx, split);
    return split.transpose(1, 2);
  };
  return {heads(q, q_heads_, &q_norm_), heads(k, kv_heads_, &k_norm_),
          heads(v, kv_heads_, nullptr)};
}

at::Tensor DecoderAttention::Forward(ForwardContext& ctx, const at::Tensor& x,
                                     const DecoderStepInputs& inputs) const {
  ModuleCall call(*this, ctx);
  std::vector<at::Tensor> qkv = Project(ctx, x);
  const RopeTables& rope = inputs.ropes[rope_index_];
  at::Tensor q = ApplyPartialRotary(qkv[0], rope);
  at::Tensor k = ApplyPartialRotary(qkv[1], rope);
  at::Tensor attended = inputs.sequences.empty()
                            ? Attend(q, k, qkv[2], inputs.biases[window_index_])
                            : AttendPerSequence(q, k, qkv[2], inputs.sequences);
  return o_->Forward(ctx, MergeHeads(attended));
}

at::Tensor DecoderAttention::Attend(const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v,
                                    const at::Tensor& bias) const {
  return softcap_ > 0 ? SoftCappedAttention(q, k, v, bias, scale_, softcap_)
                      : ScaledDotProductAttention(q, k, v, bias, scale_);
}

at::Tensor DecoderAttention::AttendPerSequence(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::vector<DecoderStepInputs::Sequence>& sequences) const {
  using Keys = DecoderStepInputs::Keys;
  std::vector<at::Tensor> parts;
  parts.reserve(sequences.size());
  bool all_blocks = true;
  for (const DecoderStepInputs::Sequence& s : sequences) {
    const at::Tensor new_k = k.narrow(2, s.offset, s.tokens);
    const at::Tensor new_v = v.narrow(2, s.offset, s.tokens);
    const at::Tensor new_q = q.narrow(2, s.offset, s.tokens);
    all_blocks = all_blocks && s.keys == Keys::kBlocks;
    if (s.keys == Keys::kAppended) {
      auto [keys, values] = s.cache->Append(layer_, new_k, new_v);
      parts.push_back(Attend(new_q, keys, values, s.biases[window_index_]));
    } else {
      s.cache->Write(layer_, new_k, new_v);
      parts.push_back(s.keys == Keys::kOwn
                          ? Attend(new_q, new_k, new_v, s.biases[window_index_])
                          : at::Tensor());
    }
  }
  at::Tensor paged = AttendBlocks(q, sequences);
  if (all_blocks) return paged.to(q.scalar_type());
  for (size_t i = 0; i < sequences.size(); ++i) {
    const DecoderStepInputs::Sequence& s = sequences[i];
    if (s.keys != Keys::kBlocks) continue;
    parts[i] = paged.narrow(2, s.offset, s.tokens).to(q.scalar_type());
  }
  return parts.size() == 1 ? parts[0] : at::cat(parts, /*dim=*/2);
}

at::Tensor DecoderAttention::AttendBlocks(
    const at::Tensor& q,
    const std::vector<DecoderStepInputs::Sequence>& sequences) const {
  std::vector<PagedQueries> paged;
  for (const DecoderStepInputs::Sequence& s : sequences) {
    if (s.keys != DecoderStepInputs::Keys::kBlocks) continue;
    paged.push_back({s.cache->Blocks(layer_, s.cache->length() + s.tokens),
                     s.offset, s.tokens});
  }
  if (paged.empty()) return at::Tensor();
  PagedAttentionOptions options;
  options.kv_heads = kv_heads_;
  options.scale = scale_;
  options.softcap = softcap_;
  options.sliding_window = sliding_window_;
  return PagedAttention(q, paged, options);
}

}  // namespace castserve::models
