#include "models/decoder/decoder_norm.h"

#include <utility>

namespace castserve::models {

absl::Status DecoderNormSlot::Add(Module& parent, const std::string& name,
                                  const DecoderSpec& spec, int64_t dim,
                                  const WeightFactory& weights) {
  if (name.empty()) return absl::OkStatus();
  if (spec.norm == DecoderNorm::kRmsPlusOne) {
    auto norm = OffsetRMSNorm::Create(name, spec.class_prefix + "RMSNorm",
                                      weights, dim, spec.norm_eps);
    if (!norm.ok()) return norm.status();
    offset_ = parent.AddChild(*std::move(norm));
    return absl::OkStatus();
  }
  auto norm = RMSNorm::Create(name, weights, dim, spec.norm_eps);
  if (!norm.ok()) return norm.status();
  rms_ = parent.AddChild(*std::move(norm));
  return absl::OkStatus();
}

at::Tensor DecoderNormSlot::Forward(ForwardContext& ctx,
                                    const at::Tensor& x) const {
  if (rms_ != nullptr) return rms_->Forward(ctx, x);
  if (offset_ != nullptr) return offset_->Forward(ctx, x);
  return x;
}

}  // namespace castserve::models
