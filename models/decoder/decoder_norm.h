// A decoder's norm of the kind its spec names (DecoderNorm): Llama's
// RMSNorm (models/layers/layers.h, kind "RMSNorm") or Gemma's OffsetRMSNorm
// (kind
// "<class_prefix>RMSNorm"), added as a child of the module that owns it.
// An empty name is no norm: Forward then returns its input.
#ifndef CASTSERVE_MODELS_DECODER_DECODER_NORM_H_
#define CASTSERVE_MODELS_DECODER_DECODER_NORM_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "models/decoder/decoder_spec.h"
#include "models/decoder/offset_rms_norm.h"
#include "models/layers/layers.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

class DecoderNormSlot {
 public:
  // Adds norm `name` over `dim` to `parent` (nothing when `name` is "").
  absl::Status Add(Module& parent, const std::string& name,
                   const DecoderSpec& spec, int64_t dim,
                   const WeightFactory& weights);
  at::Tensor Forward(ForwardContext& ctx, const at::Tensor& x) const;

 private:
  RMSNorm* rms_ = nullptr;
  OffsetRMSNorm* offset_ = nullptr;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_DECODER_NORM_H_
