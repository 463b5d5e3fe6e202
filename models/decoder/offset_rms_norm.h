// OffsetRMSNorm: Gemma's RMSNorm, x / sqrt(mean(x^2) + eps) * (1 + weight)
// over the last dimension, computed in f32 and cast back to the input dtype
// after the multiplication (where Llama's RMSNorm casts before it). Its
// checkpoint weight is the offset from 1. Kind given by the architecture
// ("Gemma3RMSNorm"), a normalization kind for the casting policy.
#ifndef CASTSERVE_MODELS_DECODER_OFFSET_RMS_NORM_H_
#define CASTSERVE_MODELS_DECODER_OFFSET_RMS_NORM_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

class OffsetRMSNorm : public Module {
 public:
  // Weight "weight" [dim]; errors as layers.h's Create functions.
  static absl::StatusOr<std::unique_ptr<OffsetRMSNorm>> Create(
      std::string name, std::string kind, const WeightFactory& weights,
      int64_t dim, double eps);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  OffsetRMSNorm(std::string name, std::string kind, double eps);
  double eps_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_OFFSET_RMS_NORM_H_
