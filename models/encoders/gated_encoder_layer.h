// GatedEncoderLayer: the layer of the rotary encoders (ModernBERT,
// NomicBERT), an EncoderSpec of kind kGated:
//
//   attention  one fused qkv projection or three, q and k rotated by the
//              layer's rotary table, the layer's bias (full attention or a
//              local band), the output projection
//   mlp        out(act(gate(x)) * up(x)), gate and up fused in one
//              projection (first half the gate) or two
//   norms      LayerNorm before each block, its output added to the
//              residual (pre-norm), or after each residual (post-norm)
//
// Biases as the spec's attention_bias / mlp_bias say (a LayerNorm's bias is
// read when the checkpoint has it). Module names are the checkpoint's
// ("layers.0.attn.Wqkv"); the attention and the MLP are modules named by
// their projections' common prefix ("layers.0.attn", kind
// "<class_prefix>Attention"; "layers.0.mlp", "<class_prefix>MLP").
//
// Immutable after Create; Forward is thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_GATED_ENCODER_LAYER_H_
#define CASTSERVE_MODELS_ENCODERS_GATED_ENCODER_LAYER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/encoders/encoder_blocks.h"
#include "models/encoders/encoder_spec.h"
#include "models/layers/layers.h"
#include "models/loading/weight_factory.h"

namespace castserve::models {

class GatedAttention;
class GatedMlpBlock;

class GatedEncoderLayer : public EncoderBlock {
 public:
  // Layer `index` of `spec` (valid: ValidateEncoderSpec), named
  // "<spec.layers>.<index>".
  static absl::StatusOr<std::unique_ptr<GatedEncoderLayer>> Create(
      int64_t index, const EncoderSpec& spec, const WeightFactory& weights);

  // Attends with step.biases[window] and step.ropes[rope] of the layer's
  // EncoderLayerAttention.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x,
                     const EncoderStep& step) const override;

 private:
  GatedEncoderLayer(std::string name, const EncoderSpec& spec,
                    const EncoderLayerAttention& attention);
  absl::Status AddNorms(const EncoderSpec& spec, int64_t index,
                        const WeightFactory& weights);

  const bool norm_first_;
  const EncoderLayerAttention attention_spec_;
  GatedAttention* attention_ = nullptr;
  GatedMlpBlock* mlp_ = nullptr;
  LayerNorm* attention_norm_ = nullptr;  // Null: ModernBERT's first layer.
  LayerNorm* mlp_norm_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_GATED_ENCODER_LAYER_H_
