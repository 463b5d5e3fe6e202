#include "models/encoders/packed_bert_layer.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <initializer_list>

#include "models/layers/attention.h"

namespace castserve::models {
namespace {

std::atomic<bool> packed_layers_enabled{true};

// An undefined optional weight (a LayerNorm without bias) stays undefined.
at::Tensor CopyOf(const at::Tensor& t) {
  return t.defined() ? t.clone() : at::Tensor();
}

}  // namespace

void SetPackedEncoderLayers(bool enabled) {
  packed_layers_enabled.store(enabled, std::memory_order_relaxed);
}

bool PackedEncoderLayersEnabled() {
  return packed_layers_enabled.load(std::memory_order_relaxed);
}

PackedBertLayer::PackedBertLayer(const Weights& w, const Options& options)
    : options_(options),
      qkv_(PackedLinear::Pack(
          at::cat({w.query_weight, w.key_weight, w.value_weight}, 0),
          at::cat({w.query_bias, w.key_bias, w.value_bias}, 0))),
      attention_output_(PackedLinear::Pack(w.attention_output_weight,
                                           w.attention_output_bias)),
      intermediate_(
          PackedLinear::Pack(w.intermediate_weight, w.intermediate_bias)),
      output_(PackedLinear::Pack(w.output_weight, w.output_bias)),
      attention_norm_weight_(CopyOf(w.attention_norm_weight)),
      attention_norm_bias_(CopyOf(w.attention_norm_bias)),
      output_norm_weight_(CopyOf(w.output_norm_weight)),
      output_norm_bias_(CopyOf(w.output_norm_bias)) {
  TORCH_INTERNAL_ASSERT(options.heads > 0 &&
                        qkv_.in_features() % options.heads == 0);
  for (const at::Tensor* copy : std::initializer_list<const at::Tensor*>{
           &w.query_bias, &w.key_bias, &w.value_bias, &attention_norm_weight_,
           &attention_norm_bias_, &output_norm_weight_, &output_norm_bias_}) {
    if (copy->defined()) copied_bytes_ += copy->nbytes();
  }
}

at::Tensor PackedBertLayer::Forward(const at::Tensor& x,
                                    const at::Tensor& attention_bias) const {
  const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2);
  const int64_t heads = options_.heads, head_dim = hidden / heads;
  // [batch, seq, 3 * hidden] viewed as query, key and value, each
  // [batch, heads, seq, head_dim] (strided: the fused attention reads them
  // in place).
  const at::Tensor qkv = qkv_.Apply(x)
                             .view({batch, seq, 3, heads, head_dim})
                             .permute({2, 0, 3, 1, 4});
  const double scale = 1 / std::sqrt(static_cast<double>(head_dim));
  const at::Tensor context = MergeHeads(
      ScaledDotProductAttention(qkv[0], qkv[1], qkv[2], attention_bias, scale));
  at::Tensor attended = attention_output_.Apply(context).add_(x);
  attended = at::layer_norm(attended, {hidden}, attention_norm_weight_,
                            attention_norm_bias_, options_.layer_norm_eps);
  at::Tensor out =
      output_.Apply(intermediate_.Apply(attended, options_.activation))
          .add_(attended);
  return at::layer_norm(out, {hidden}, output_norm_weight_, output_norm_bias_,
                        options_.layer_norm_eps);
}

int64_t PackedBertLayer::packed_bytes() const {
  return qkv_.packed_bytes() + attention_output_.packed_bytes() +
         intermediate_.packed_bytes() + output_.packed_bytes() + copied_bytes_;
}

}  // namespace castserve::models
