// DecoderAttention: a decoder layer's self-attention block, every variant
// the decoder architectures need: grouped-query heads, separate q/k/v or
// one fused qkv projection, optional q/k/v and output biases, optional
// per-head q/k norms (before the rotation), full or partial rotary from
// one of the model's tables, a global or sliding-window causal mask, a
// configurable score scale and optional tanh soft-capping of the scores.
//
// Also DecoderStepInputs, what every layer of one forward or decode step
// shares: the rotary tables and, per distinct attention window, the bias
// of the whole batch (a forward) or of each sequence over its own cache.
//
// Immutable once made; Forward is thread-safe (each call its own context).
#ifndef CASTSERVE_MODELS_DECODER_DECODER_ATTENTION_H_
#define CASTSERVE_MODELS_DECODER_DECODER_ATTENTION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/decoder/decoder_norm.h"
#include "models/decoder/decoder_spec.h"
#include "models/generation/kv_cache.h"
#include "models/layers/layers.h"
#include "models/layers/rotary.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

struct DecoderStepInputs {
  // Where a sequence's attention reads its keys and values.
  enum class Keys {
    // Append's tensors (a contiguous cache; a paged one off the CPU: a
    // gathered copy), with the biases.
    kAppended,
    // Nothing is cached before the step: its own keys are all of them
    // (fused attention with the biases, no copy).
    kOwn,
    // Cached tokens in blocks on the CPU: paged attention reads them in
    // place (causal and windowed by position; no biases).
    kBlocks,
  };
  // One sequence of a decode step: tokens offset..offset+tokens-1 of the
  // step's flattened tokens, its cache, and for kAppended and kOwn per
  // window the bias of its queries over its cached and new keys.
  struct Sequence {
    SequenceKv* cache = nullptr;
    int64_t offset = 0;
    int64_t tokens = 0;
    Keys keys = Keys::kAppended;
    std::vector<at::Tensor> biases;
  };
  std::vector<RopeTables> ropes;    // Per DecoderSpec::ropes entry.
  std::vector<at::Tensor> biases;   // Per window (a forward).
  std::vector<Sequence> sequences;  // Empty for a forward.
};

// softmax(cap * tanh(q k^T * scale / cap) + bias) v, the scores materialized
// (the fused kernel has no soft cap) and the softmax in f32, as
// transformers' eager attention. Shapes as ScaledDotProductAttention's.
at::Tensor SoftCappedAttention(const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& bias,
                               double scale, double cap);

class DecoderAttention : public Module {
 public:
  // Layer `layer` (its index in the KV cache) whose mask is window
  // `window_index` of the step inputs' biases.
  static absl::StatusOr<std::unique_ptr<DecoderAttention>> Create(
      const std::string& name, const DecoderSpec& spec, int64_t layer,
      int window_index, const WeightFactory& weights);

  // x [1 or batch, seq, hidden] -> [.., seq, hidden].
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const DecoderStepInputs& inputs) const;

 private:
  DecoderAttention(const std::string& name, const DecoderSpec& spec,
                   int64_t layer, int window_index);
  absl::Status AddProjections(const DecoderSpec& spec,
                              const WeightFactory& weights);
  // q, k, v [batch, heads, seq, head_dim], q and k normed, not rotated.
  std::vector<at::Tensor> Project(ForwardContext& ctx,
                                  const at::Tensor& x) const;
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& bias) const;
  at::Tensor AttendPerSequence(
      const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
      const std::vector<DecoderStepInputs::Sequence>& sequences) const;
  // Paged attention of the kBlocks sequences (their keys written), f32
  // [1, q_heads, total, head_dim]; undefined when there are none.
  at::Tensor AttendBlocks(
      const at::Tensor& q,
      const std::vector<DecoderStepInputs::Sequence>& sequences) const;

  const int64_t layer_;
  const int window_index_;
  const int rope_index_;
  const int64_t q_heads_;
  const int64_t kv_heads_;
  const int64_t head_dim_;
  const double scale_;
  const double softcap_;
  const int64_t sliding_window_;
  Linear* q_ = nullptr;
  Linear* k_ = nullptr;
  Linear* v_ = nullptr;
  Linear* qkv_ = nullptr;  // Fused instead of q_, k_, v_.
  Linear* o_ = nullptr;
  DecoderNormSlot q_norm_;
  DecoderNormSlot k_norm_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_DECODER_ATTENTION_H_
