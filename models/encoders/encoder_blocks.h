// The blocks of BERT-like encoders, each a Module named as the checkpoint
// names it (without the backbone's key prefix) and assembled by
// EncoderModel (encoder_model.h) from an EncoderSpec:
//
//   EncoderEmbeddings  word + position + token type embeddings (each table
//                      the spec names), LayerNorm; positions as the spec's
//                      EncoderPositions says
//   EncoderBlock       what every layer kind is: x and the forward's
//                      EncoderStep in, x out
//   EncoderLayer       kBert: self-attention (query/key/value, padding
//                      mask), dense + residual + LayerNorm, intermediate
//                      dense with the activation, dense + residual +
//                      LayerNorm; in f32 on the CPU with cached weights
//                      through PackedBertLayer (packed_bert_layer.h)
//   GatedEncoderLayer  kGated (gated_encoder_layer.h)
//
// Immutable after Create; Forward is thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_
#define CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "models/encoders/encoder_spec.h"
#include "models/encoders/packed_bert_layer.h"
#include "models/layers/layers.h"
#include "models/layers/rotary.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

// Moves a freshly made child into `parent` and stores its address in `out`,
// or returns the error that made it fail.
template <typename T>
absl::Status Adopt(Module& parent, absl::StatusOr<std::unique_ptr<T>> child,
                   T** out) {
  if (!child.ok()) return child.status();
  *out = parent.AddChild(*std::move(child));
  return absl::OkStatus();
}

class EncoderEmbeddings : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<EncoderEmbeddings>> Create(
      const EncoderSpec& spec, const WeightFactory& weights);

  // ids, token_types int64 [batch, seq] -> [batch, seq, hidden];
  // token_types is ignored by a model without a token type table.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& ids,
                     const at::Tensor& token_types) const;

  // The position ids of `ids` [batch, seq] under `spec`'s scheme.
  static at::Tensor PositionIds(const EncoderSpec& spec, const at::Tensor& ids);

 private:
  explicit EncoderEmbeddings(const EncoderSpec& spec);
  const EncoderSpec& spec_;  // Outlives the module (the model holds both).
  Embedding* word_ = nullptr;
  Embedding* position_ = nullptr;
  Embedding* token_type_ = nullptr;
  LayerNorm* norm_ = nullptr;
};

// What every layer of one forward shares, made once per forward by the
// model.
struct EncoderStep {
  // Per attention window (EncoderLayerAttention::window, 0 for full
  // attention) the additive bias, broadcastable to [batch, heads, seq,
  // seq]; undefined when nothing is masked.
  std::map<int64_t, at::Tensor> biases;
  // Per EncoderSpec::ropes entry, cos and sin for positions 0..seq-1.
  std::vector<RopeTables> ropes;
};

// A layer of the stack. Forward: x [batch, seq, hidden] -> the same shape.
class EncoderBlock : public Module {
 public:
  using Module::Module;
  virtual at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                             const EncoderStep& step) const = 0;
};

class EncoderSelfAttention;
class DenseAddNorm;

class EncoderLayer : public EncoderBlock {
 public:
  // The layer `name` ("encoder.layer.3").
  static absl::StatusOr<std::unique_ptr<EncoderLayer>> Create(
      const std::string& name, const EncoderSpec& spec,
      const WeightFactory& weights);

  // Attends with step.biases[0] (full attention over the real tokens).
  // Through PackedBertLayer when the weights allow it (Packable),
  // PackedEncoderLayersEnabled() and no module inside the layer has a hook
  // (a profiler's, a test's): then only this layer's own ModuleCall runs,
  // not its children's.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const EncoderStep& step) const override;

  // True when `options` keep plain f32 compute copies on the CPU for the
  // model's life with no hooks between the layer's modules: no layerwise
  // casting, cached copies, no prefetch.
  static bool Packable(const WeightPolicyOptions& options);

  // Bytes of the packed weights: 0 until a forward took the packed path,
  // and after DropDerivedCopies.
  int64_t packed_bytes() const { return packed_bytes_.load(); }

  // Drops the packed weights (Model::Demote below kHot).
  void DropDerivedCopies(casting::ReleasedMemory& released) override;
  int64_t DerivedBytes() const override { return packed_bytes(); }
  // What the packed layer holds when the layer takes the packed path
  // (PackedBertLayer::packed_bytes: its products' f32 weights, the
  // query/key/value biases and the LayerNorm parameters, one copy each),
  // else 0.
  int64_t ConfiguredDerivedBytes() const override;

 private:
  EncoderLayer(std::string name, const EncoderSpec& spec);
  // The packed layer, made from this forward's compute copies when there is
  // none (which holds them in `context` as the unfused path would).
  std::shared_ptr<const PackedBertLayer> Packed(ForwardContext& context) const;
  bool DescendantsHaveHooks() const;

  const Activation activation_;
  const int64_t heads_;
  const double layer_norm_eps_;
  bool packable_ = false;  // Packable(options) and PackedLinear::Available().
  std::vector<const Module*> descendants_;  // Every module inside the layer.
  mutable absl::Mutex packed_mu_;
  mutable std::shared_ptr<const PackedBertLayer> packed_
      ABSL_GUARDED_BY(packed_mu_);
  mutable std::atomic<int64_t> packed_bytes_{0};
  EncoderSelfAttention* self_attention_ = nullptr;
  DenseAddNorm* attention_output_ = nullptr;
  Linear* intermediate_ = nullptr;
  DenseAddNorm* output_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_
