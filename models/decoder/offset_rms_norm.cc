#include "models/decoder/offset_rms_norm.h"

#include <ATen/ATen.h>

#include <utility>

#include "models/layers/layers.h"

namespace castserve::models {

OffsetRMSNorm::OffsetRMSNorm(std::string name, std::string kind, double eps)
    : Module(std::move(name), std::move(kind)), eps_(eps) {}

absl::StatusOr<std::unique_ptr<OffsetRMSNorm>> OffsetRMSNorm::Create(
    std::string name, std::string kind, const WeightFactory& weights,
    int64_t dim, double eps) {
  std::unique_ptr<OffsetRMSNorm> norm(
      new OffsetRMSNorm(std::move(name), std::move(kind), eps));
  absl::Status status = AddParameter(*norm, weights, "weight", {dim});
  if (!status.ok()) return status;
  return norm;
}

at::Tensor OffsetRMSNorm::Forward(ForwardContext& context,
                                  const at::Tensor& x) const {
  ModuleCall call(*this, context);
  at::Tensor gamma = Param(context, "weight").to(at::kFloat);
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normalized = x32 * at::rsqrt(x32.pow(2).mean({-1}, true) + eps_);
  return (normalized * (1.0 + gamma)).to(x.scalar_type());
}

}  // namespace castserve::models
