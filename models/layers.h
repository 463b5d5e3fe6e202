// The layers castserve's architectures are made of. Each is a Module whose
// forward starts with a ModuleCall (so hooks run) and reads its weights with
// Param, in the weights' compute dtype. Activations are cast to the compute
// dtype by the caller (the architecture), not per layer.
//
// Made by static Create functions that fetch their weights from a
// WeightFactory and fail with its precise error (missing key, bad dtype).
#ifndef CASTSERVE_MODELS_LAYERS_H_
#define CASTSERVE_MODELS_LAYERS_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/module.h"
#include "models/weight_factory.h"

namespace castserve::models {

// y = x W^T + b. Kind "Linear"; weights "weight" [out, in], optional "bias".
class Linear : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      std::string name, const WeightFactory& weights, bool bias);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  using Module::Module;
};

// Row lookup. Kind "Embedding"; weight "weight" [num, dim]. Ids outside
// [0, num) throw c10::Error naming the id and the table size.
class Embedding : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Embedding>> Create(
      std::string name, const WeightFactory& weights);
  // With a transient table, decodes only the rows of `ids`
  // (casting::Weight::GatherRows) instead of the whole table.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& ids) const;
  int64_t num_embeddings() const;
  // True when the table's compute copies are transient.
  bool ReadsOwnWeights() const override;

 private:
  using Module::Module;
};

// Kind "LayerNorm"; weights "weight", "bias" (optional).
class LayerNorm : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<LayerNorm>> Create(
      std::string name, const WeightFactory& weights, double eps);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  LayerNorm(std::string name, double eps);
  double eps_;
};

// x / sqrt(mean(x^2) + eps) * weight, computed in f32 as Llama does, then
// cast back to the input dtype. Kind "RMSNorm"; weight "weight".
class RMSNorm : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<RMSNorm>> Create(
      std::string name, const WeightFactory& weights, double eps);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  RMSNorm(std::string name, double eps);
  double eps_;
};

// Kind "Conv2d" (patch embeddings); weights "weight" [out, in, kh, kw],
// optional "bias".
class Conv2d : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Conv2d>> Create(
      std::string name, const WeightFactory& weights, int64_t stride,
      int64_t padding, bool bias);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  Conv2d(std::string name, int64_t stride, int64_t padding);
  int64_t stride_;
  int64_t padding_;
};

// FailedPrecondition naming the checkpoint key when `module`'s weight
// `local_name` does not have `expected` shape (absent weights pass).
absl::Status CheckWeightShape(const Module& module,
                              const std::string& local_name,
                              const std::vector<int64_t>& expected);

// Activations by their Hugging Face names: "gelu" (erf), "gelu_new" /
// "gelu_pytorch_tanh" / "gelu_fast" (tanh approximation), "quick_gelu"
// (x * sigmoid(1.702 x)), "silu" / "swish", "relu" (case-insensitive).
// InvalidArgument listing the supported names otherwise.
enum class Activation { kGelu, kGeluTanh, kQuickGelu, kSilu, kRelu };
absl::StatusOr<Activation> ParseActivation(absl::string_view hf_name);
at::Tensor Activate(Activation activation, const at::Tensor& x);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LAYERS_H_
