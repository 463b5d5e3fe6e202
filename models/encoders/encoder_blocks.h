// The blocks of BERT-like encoders, each a Module named as the checkpoint
// names it (without the backbone's key prefix) and assembled by
// EncoderModel (encoder_model.h) from an EncoderSpec:
//
//   EncoderEmbeddings  word + position + token type embeddings, LayerNorm;
//                      positions as the spec's EncoderPositions says
//   EncoderLayer       self-attention (query/key/value, padding mask),
//                      dense + residual + LayerNorm, intermediate dense with
//                      the activation, dense + residual + LayerNorm
//
// Immutable after Create; Forward is thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_
#define CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/encoders/encoder_spec.h"
#include "models/layers/layers.h"
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

  // ids, token_types int64 [batch, seq] -> [batch, seq, hidden].
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

class EncoderSelfAttention;
class DenseAddNorm;

class EncoderLayer : public Module {
 public:
  // The layer `name` ("encoder.layer.3").
  static absl::StatusOr<std::unique_ptr<EncoderLayer>> Create(
      const std::string& name, const EncoderSpec& spec,
      const WeightFactory& weights);

  // x [batch, seq, hidden]; additive_mask [batch, 1, 1, seq] or undefined
  // (no padding).
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const at::Tensor& additive_mask) const;

 private:
  EncoderLayer(std::string name, const EncoderSpec& spec);
  const Activation activation_;
  EncoderSelfAttention* self_attention_ = nullptr;
  DenseAddNorm* attention_output_ = nullptr;
  Linear* intermediate_ = nullptr;
  DenseAddNorm* output_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_ENCODER_BLOCKS_H_
