// DecoderLayer: one pre-norm residual block of a decoder,
//   h = x + attn_out_norm(attention(attn_in_norm(x)))
//   y = h + mlp_out_norm(mlp(mlp_in_norm(h)))
// where the "out" norms exist only when the spec names them (Gemma's
// sandwich norms). Kind "<class_prefix>DecoderLayer". Immutable once made;
// Forward is thread-safe.
#ifndef CASTSERVE_MODELS_DECODER_DECODER_LAYER_H_
#define CASTSERVE_MODELS_DECODER_DECODER_LAYER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/decoder/decoder_attention.h"
#include "models/decoder/decoder_norm.h"
#include "models/decoder/decoder_spec.h"
#include "models/decoder/gated_mlp.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

class DecoderLayer : public Module {
 public:
  // Layer `index` of `spec`, its mask window `window_index` of the step
  // inputs' biases.
  static absl::StatusOr<std::unique_ptr<DecoderLayer>> Create(
      const DecoderSpec& spec, int64_t index, int window_index,
      const WeightFactory& weights);
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x,
                     const DecoderStepInputs& inputs) const;

 private:
  using Module::Module;

  DecoderNormSlot attention_in_norm_;
  DecoderAttention* attention_ = nullptr;
  DecoderNormSlot attention_out_norm_;
  DecoderNormSlot mlp_in_norm_;
  GatedMlp* mlp_ = nullptr;
  DecoderNormSlot mlp_out_norm_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_DECODER_LAYER_H_
