// GatedMlp: a decoder layer's feed-forward block,
// down(act(gate(x)) * up(x)), with gate and up as two projections (Llama,
// Qwen, Gemma) or one fused gate_up projection whose first half is the gate
// (Phi-3); the activation is the config's (SiLU, GELU-tanh, ...).
// Immutable once made; Forward is thread-safe.
#ifndef CASTSERVE_MODELS_DECODER_GATED_MLP_H_
#define CASTSERVE_MODELS_DECODER_GATED_MLP_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/decoder/decoder_spec.h"
#include "models/layers/activation.h"
#include "models/layers/layers.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

class GatedMlp : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<GatedMlp>> Create(
      const std::string& name, const DecoderSpec& spec,
      const WeightFactory& weights);
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const;

 private:
  GatedMlp(const std::string& name, const DecoderSpec& spec);

  const Activation activation_;
  const int64_t inner_;
  Linear* gate_ = nullptr;
  Linear* up_ = nullptr;
  Linear* gate_up_ = nullptr;  // Fused instead of gate_ and up_.
  Linear* down_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_GATED_MLP_H_
