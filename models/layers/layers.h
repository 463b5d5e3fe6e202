// The layers castserve's architectures are made of. Each is a Module whose
// forward starts with a ModuleCall (so hooks run) and reads its weights with
// Param, in the weights' compute dtype. Activations are cast to the compute
// dtype by the caller (the architecture), not per layer.
//
// Made by static Create functions given the sizes the architecture derives
// from config.json. They fetch their weights from a WeightFactory, which
// checks each one's shape against those sizes and its dtype from the
// checkpoint header, and fail with its precise error (missing key, "weight
// 'k': expected shape [64, 64], found [32, 16]", bad dtype). A layer that
// was made therefore computes with the shapes its sizes say.
#ifndef CASTSERVE_MODELS_LAYERS_LAYERS_H_
#define CASTSERVE_MODELS_LAYERS_LAYERS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/kernels/storage_product.h"
#include "models/layers/activation.h"
#include "models/loading/weight_factory.h"
#include "models/module.h"

namespace castserve::models {

// y = x W^T + b with W own weight `weight_name` of `owner` (a Linear's, or
// the embedding table a tied head multiplies by), inside owner's hooks.
// Reads W's storage (models/kernels/storage_product.h) when ReadsStorageFor(W,
// rows of x), even when this forward holds a compute copy of W (a hook that
// found one prefetched holds it, to release it): the result depends on W and
// the rows only. Else multiplies by the compute copy (Param) with
// LinearProduct. Notes x's rows in `context` first. Throws c10::Error
// (WeightUnavailableError) if W cannot be read.
at::Tensor ProductWithWeight(
    const Module& owner, ForwardContext& context, absl::string_view weight_name,
    const at::Tensor& x, const at::Tensor& bias,
    std::optional<Activation> activation = std::nullopt);

// y = x W^T + b. Kind "Linear"; weights "weight" [out_features,
// in_features] and, with `bias`, "bias" [out_features]. With few rows, the
// product reads the weight's storage instead of a compute copy
// (ProductWithWeight); the bias is always a compute copy (small).
class Linear : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      std::string name, const WeightFactory& weights, int64_t in_features,
      int64_t out_features, bool bias);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;
  // Activate(activation, Forward(x)), with the activation fused into the
  // product where the kernel can (models/kernels/matmul.h).
  at::Tensor ForwardActivated(ForwardContext& context, const at::Tensor& x,
                              Activation activation) const;
  // "weight" when ReadsStorageFor(it, context.activation_rows()).
  bool ComputesFromStorage(absl::string_view local_name,
                           const ForwardContext& context) const override;

 private:
  using Module::Module;
  at::Tensor Product(ForwardContext& context, const at::Tensor& x,
                     std::optional<Activation> activation) const;

  // "weight", looked up and classified once at creation.
  casting::Weight* weight_ = nullptr;
  StorageReads storage_reads_ = StorageReads::kNever;
};

// Row lookup. Kind "Embedding"; weight "weight" [num_embeddings,
// embedding_dim]. Ids outside [0, num_embeddings) throw c10::Error naming
// the id and the table size.
class Embedding : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Embedding>> Create(
      std::string name, const WeightFactory& weights, int64_t num_embeddings,
      int64_t embedding_dim);
  // With a transient table, a cool one serving from its mapping
  // (casting::Weight::ServesMappedWhenCool), or a cached one whose compute
  // copy is not built yet, decodes only the rows of `ids`
  // (casting::Weight::GatherRows) instead of the whole table: the same
  // values as the whole table's. A request never builds a cached table's
  // whole copy (1 GiB of f32 for a 128k-token vocabulary) to read a few
  // rows; a tied head's first product, or a promotion off the request path
  // (casting::Weight::Promote), does.
  at::Tensor Forward(ForwardContext& context, const at::Tensor& ids) const;
  int64_t num_embeddings() const;
  // True when the table's compute copies are transient, while it serves
  // from its mapping, or while its cached copy is not built (decided per
  // forward: false once a copy exists).
  bool ReadsOwnWeights() const override;

 private:
  using Module::Module;
};

// Normalizes the last dimension, of size `dim`. Kind "LayerNorm"; weights
// "weight" [dim] and "bias" [dim] (optional: absent from the checkpoint,
// no bias).
class LayerNorm : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<LayerNorm>> Create(
      std::string name, const WeightFactory& weights, int64_t dim, double eps);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  LayerNorm(std::string name, double eps);
  double eps_;
};

// x / sqrt(mean(x^2) + eps) * weight over the last dimension, of size
// `dim`, computed in f32 as Llama does, then cast back to the input dtype.
// Kind "RMSNorm"; weight "weight" [dim].
class RMSNorm : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<RMSNorm>> Create(
      std::string name, const WeightFactory& weights, int64_t dim, double eps);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  RMSNorm(std::string name, double eps);
  double eps_;
};

// A square-kernel convolution (patch embeddings). Kind "Conv2d"; weights
// "weight" [out_channels, in_channels, kernel_size, kernel_size] and, with
// `bias`, "bias" [out_channels].
class Conv2d : public Module {
 public:
  struct Options {
    int64_t in_channels = 0;
    int64_t out_channels = 0;
    int64_t kernel_size = 0;
    int64_t stride = 1;
    int64_t padding = 0;
    bool bias = true;
  };
  static absl::StatusOr<std::unique_ptr<Conv2d>> Create(
      std::string name, const WeightFactory& weights, const Options& options);
  at::Tensor Forward(ForwardContext& context, const at::Tensor& x) const;

 private:
  Conv2d(std::string name, int64_t stride, int64_t padding);
  int64_t stride_;
  int64_t padding_;
};

// Adds weight `local_name` of `shape` to `module`, made by `weights` (with
// its checks): a module's own parameter that belongs to no layer, such as
// CLIP's class embedding or SigLIP's probe.
absl::Status AddParameter(Module& module, const WeightFactory& weights,
                          absl::string_view local_name,
                          absl::Span<const int64_t> shape);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LAYERS_LAYERS_H_
