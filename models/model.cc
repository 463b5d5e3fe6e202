#include "models/model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/core/InferenceMode.h"
#include "c10/util/Exception.h"
#include "casting/device/device_codec.h"
#include "casting/device/torch_types.h"

namespace castserve::models {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckInput(const TensorSpec& spec, const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.name, "' is an undefined tensor"));
  }
  if (tensor.scalar_type() != spec.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.name, "' has dtype ",
                     c10::toString(tensor.scalar_type()), ", expected ",
                     c10::toString(spec.dtype)));
  }
  const std::vector<int64_t> shape = tensor.sizes().vec();
  bool dims_match = shape.size() == spec.shape.size();
  for (size_t i = 0; dims_match && i < shape.size(); ++i) {
    dims_match = spec.shape[i] == -1 || spec.shape[i] == shape[i];
  }
  if (!dims_match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has shape ", ShapeString(shape), ", expected ",
        ShapeString(spec.shape), " (-1: any size)"));
  }
  return absl::OkStatus();
}

absl::Status CheckSignature(const std::vector<TensorSpec>& specs,
                            const NamedTensors& inputs) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : specs) names.push_back(spec.name);
  for (const auto& [name, tensor] : inputs) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", name,
                       "'; the model takes: ", absl::StrJoin(names, ", ")));
    }
  }
  for (const TensorSpec& spec : specs) {
    auto it = inputs.find(spec.name);
    if (it == inputs.end()) {
      if (spec.optional) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("missing required input '", spec.name, "'"));
    }
    absl::Status status = CheckInput(spec, it->second);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

NamedTensors OnDevice(const NamedTensors& tensors,
                      const casting::Device& device) {
  if (device.is_cpu()) return tensors;
  NamedTensors moved;
  for (const auto& [name, tensor] : tensors) {
    moved.emplace(name, casting::ToDevice(tensor, device));
  }
  return moved;
}

// Outputs computed elsewhere, copied back (this waits for the forward's
// stream); CPU outputs as they are.
NamedTensors ToHost(NamedTensors tensors) {
  for (auto& [name, tensor] : tensors) {
    if (!tensor.is_cpu()) tensor = tensor.cpu();
  }
  return tensors;
}

}  // namespace

absl::Status StatusFromTorchError(const c10::Error& error) {
  const std::string message = error.what_without_backtrace();
  if (const auto* status_error = dynamic_cast<const StatusError*>(&error)) {
    return absl::Status(status_error->status().code(), message);
  }
  if (casting::IsOutOfMemoryMessage(message))
    return absl::ResourceExhaustedError(message);
  if (dynamic_cast<const c10::NotImplementedError*>(&error) != nullptr) {
    return absl::UnimplementedError(message);
  }
  if (dynamic_cast<const c10::IndexError*>(&error) != nullptr ||
      dynamic_cast<const c10::ValueError*>(&error) != nullptr ||
      dynamic_cast<const c10::TypeError*>(&error) != nullptr) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

CheckedInputs CheckedInputs::Join(
    const std::vector<const CheckedInputs*>& parts) {
  TORCH_INTERNAL_ASSERT(!parts.empty(), "joining no inputs");
  const CheckedInputs& first = *parts.front();
  NamedTensors joined;
  for (const auto& [name, unused] : first.tensors_) {
    std::vector<at::Tensor> columns;
    columns.reserve(parts.size());
    for (const CheckedInputs* part : parts) {
      TORCH_INTERNAL_ASSERT(part->model_ == first.model_ &&
                                part->tensors_.size() == first.tensors_.size(),
                            "joining inputs of different signatures");
      columns.push_back(part->tensors_.at(name));
    }
    // at::cat asserts the remaining agreement (dtypes, trailing dimensions).
    joined[name] = at::cat(columns, 0);
  }
  return CheckedInputs(first.model_, std::move(joined));
}

absl::StatusOr<CheckedInputs> Model::CheckInputs(NamedTensors inputs) const {
  absl::Status valid = CheckSignature(this->inputs(), inputs);
  if (!valid.ok()) return valid;
  return CheckLimits(std::move(inputs));
}

absl::StatusOr<CheckedInputs> Model::CheckLimits(NamedTensors inputs) const {
  return CatchExceptions([&]() -> absl::StatusOr<CheckedInputs> {
    // CheckInputs' rules as an assertion: the caller checked them.
    const absl::Status signature = CheckSignature(this->inputs(), inputs);
    TORCH_INTERNAL_ASSERT(signature.ok(), "inputs passed the request checks ",
                          "but not the signature: ", signature.ToString());
    absl::Status valid = ValidateInputs(inputs);
    if (!valid.ok()) return valid;
    return CheckedInputs(this, std::move(inputs));
  });
}

absl::StatusOr<NamedTensors> Model::Forward(
    const NamedTensors& inputs, const Cancellation* cancellation) const {
  absl::StatusOr<CheckedInputs> checked = CheckInputs(inputs);
  if (!checked.ok()) return checked.status();
  return Run(*checked, cancellation);
}

absl::StatusOr<NamedTensors> Model::Run(
    const CheckedInputs& inputs, const Cancellation* cancellation) const {
  const ForwardPass pass = EnterForward();
  absl::StatusOr<NamedTensors> outputs =
      CatchExceptions([&]() -> absl::StatusOr<NamedTensors> {
        TORCH_INTERNAL_ASSERT(&inputs.model() == this,
                              "inputs checked by another model");
        c10::InferenceMode inference_mode;
        ForwardContext context(cancellation);
        return ToHost(
            ForwardImpl(context, OnDevice(inputs.tensors(), device())));
      });
  if (absl::IsResourceExhausted(outputs.status())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("during the forward of ", architecture(), ": ",
                     outputs.status().message()));
  }
  return outputs;
}

absl::Status Model::Promote(casting::WeightTier tier,
                            const std::function<bool()>& cancelled,
                            int64_t* built_bytes) {
  const auto held = [](const casting::Weight& weight) {
    const casting::Footprint footprint = weight.footprint();
    return footprint.total_resident_bytes() + footprint.cached_compute_bytes();
  };
  std::vector<casting::Weight*> weights;
  root().Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      weights.push_back(weight.get());
    }
  });
  // Last to first: a forward that starts with the promotion runs first to
  // last, so the two meet at one weight instead of the forward catching up
  // with the promotion and then waiting for it at every weight.
  for (auto it = weights.rbegin(); it != weights.rend(); ++it) {
    casting::Weight* weight = *it;
    if (cancelled()) return absl::OkStatus();
    const ForwardPass pass = EnterForward();  // Holds a Demote off.
    const int64_t before = built_bytes != nullptr ? held(*weight) : 0;
    if (absl::Status status = weight->Promote(tier); !status.ok()) {
      return status;
    }
    if (built_bytes != nullptr) {
      *built_bytes += std::max<int64_t>(held(*weight) - before, 0);
    }
  }
  return absl::OkStatus();
}

absl::Status Model::Demote(casting::WeightTier tier,
                           casting::ReleasedMemory* released) {
  // Freed on return, after forwards may run again.
  casting::ReleasedMemory freed_here;
  if (released == nullptr) released = &freed_here;
  absl::MutexLock no_forwards(&forward_gate_);
  absl::Status status;
  root().Visit([&](Module& module) {
    if (tier != casting::WeightTier::kHot) module.DropDerivedCopies(*released);
    for (const auto& [name, weight] : module.weights()) {
      if (status.ok()) status = weight->Demote(tier, released);
    }
  });
  return status;
}

}  // namespace castserve::models
