#include "models/loading/weight_policy.h"

namespace castserve::models {

casting::ElementType EffectiveComputeDtype(const WeightPolicyOptions& options) {
  return options.casting.has_value() ? options.casting->options().compute_dtype
                                     : options.compute_dtype;
}

casting::WeightOptions WeightOptionsFor(const WeightPolicyOptions& options,
                                        absl::string_view module_name,
                                        absl::string_view kind) {
  casting::WeightOptions weight;
  weight.residency = options.residency;
  weight.compute_dtype = EffectiveComputeDtype(options);
  weight.storage = casting::StorageFormat::Plain(weight.compute_dtype);
  weight.compute_copy = options.compute_copy;
  weight.codec = options.codec;
  weight.device = options.device;
  weight.storage_on_host = options.storage_on_host;
  if (options.casting.has_value()) {
    casting::WeightDecision decision =
        options.casting->Decide(module_name, kind);
    if (decision.cast) {
      weight.residency = casting::Residency::kResident;
      weight.storage = decision.storage;
      weight.compute_dtype = decision.compute_dtype;
    }
  }
  return weight;
}

bool UsesBufferPool(const WeightPolicyOptions& options) {
  return options.compute_copy == casting::ComputeCopyPolicy::kTransient &&
         options.reuse_transient_buffers && options.device.is_cpu();
}

bool NeedsCastingHooks(const WeightPolicyOptions& options) {
  return options.compute_copy == casting::ComputeCopyPolicy::kTransient ||
         options.prefetch;
}

}  // namespace castserve::models
