#include "models/layers/layers.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/status/status.h"
#include "c10/util/Exception.h"
#include "models/kernels/matmul.h"
#include "models/kernels/storage_product.h"

namespace castserve::models {
namespace {

// Rows of activations `x` [..., features] holds.
int64_t RowsOf(const at::Tensor& x) {
  return x.dim() == 0 || x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
}

// Adds weight `local_name` of `shape` to `module` when the checkpoint has
// it; a module without it has none.
absl::Status AddOptionalParameter(Module& module, const WeightFactory& weights,
                                  absl::string_view local_name,
                                  absl::Span<const int64_t> shape) {
  if (!weights.Has(module.name(), local_name)) return absl::OkStatus();
  return AddParameter(module, weights, local_name, shape);
}

}  // namespace

absl::Status AddParameter(Module& module, const WeightFactory& weights,
                          absl::string_view local_name,
                          absl::Span<const int64_t> shape) {
  absl::StatusOr<std::unique_ptr<casting::Weight>> weight =
      weights.Make(module.name(), module.kind(), local_name, shape);
  if (!weight.ok()) return weight.status();
  module.AddWeight(std::string(local_name), *std::move(weight));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(
    std::string name, const WeightFactory& weights, int64_t in_features,
    int64_t out_features, bool bias) {
  std::unique_ptr<Linear> linear(new Linear(std::move(name), "Linear"));
  absl::Status status =
      AddParameter(*linear, weights, "weight", {out_features, in_features});
  if (status.ok() && bias) {
    status = AddParameter(*linear, weights, "bias", {out_features});
  }
  if (!status.ok()) return status;
  linear->weight_ = linear->weight("weight");
  linear->storage_reads_ = StorageReadsOf(*linear->weight_);
  return linear;
}

namespace {

// ProductWithWeight once the rows are noted and the storage decision made.
at::Tensor ProductWith(const Module& owner, ForwardContext& context,
                       absl::string_view weight_name, casting::Weight& weight,
                       bool reads_storage, const at::Tensor& x,
                       const at::Tensor& bias,
                       std::optional<Activation> activation) {
  // A compute copy this forward holds anyway (one prefetched before the
  // rows were known) is not used when the rows say storage: the result
  // depends on the weight and the rows only, never on what a prefetch
  // guessed, so a first forward equals the later ones bit for bit.
  if (!reads_storage) {
    return LinearProduct(x, owner.Param(context, weight_name), bias,
                         activation);
  }
  absl::StatusOr<const casting::StorageView*> view = weight.ReadStorage();
  if (!view.ok()) throw WeightUnavailableError(weight.name(), view.status());
  absl::StatusOr<at::Tensor> y = StorageProduct(x, **view, bias, activation);
  if (!y.ok()) throw WeightUnavailableError(weight.name(), y.status());
  return *std::move(y);
}

}  // namespace

at::Tensor ProductWithWeight(const Module& owner, ForwardContext& context,
                             absl::string_view weight_name, const at::Tensor& x,
                             const at::Tensor& bias,
                             std::optional<Activation> activation) {
  const int64_t rows = RowsOf(x);
  context.NoteActivationRows(rows);
  casting::Weight& weight = *owner.weight(weight_name);
  return ProductWith(owner, context, weight_name, weight,
                     ReadsStorageFor(weight, rows), x, bias, activation);
}

at::Tensor Linear::Product(ForwardContext& context, const at::Tensor& x,
                           std::optional<Activation> activation) const {
  // Noted before the hooks run: they ask ComputesFromStorage with these
  // rows, which decides as reads_storage does.
  const int64_t rows = RowsOf(x);
  context.NoteActivationRows(rows);
  const bool reads_storage = ReadsStorageFor(storage_reads_, rows);
  ModuleCall call(*this, context);
  return ProductWith(*this, context, "weight", *weight_, reads_storage, x,
                     OptionalParam(context, "bias"), activation);
}

at::Tensor Linear::Forward(ForwardContext& context, const at::Tensor& x) const {
  return Product(context, x, std::nullopt);
}

at::Tensor Linear::ForwardActivated(ForwardContext& context,
                                    const at::Tensor& x,
                                    Activation activation) const {
  return Product(context, x, activation);
}

bool Linear::ComputesFromStorage(absl::string_view local_name,
                                 const ForwardContext& context) const {
  return ReadsStorageFor(storage_reads_, context.activation_rows()) &&
         local_name == "weight";
}

absl::StatusOr<std::unique_ptr<Embedding>> Embedding::Create(
    std::string name, const WeightFactory& weights, int64_t num_embeddings,
    int64_t embedding_dim) {
  std::unique_ptr<Embedding> embedding(
      new Embedding(std::move(name), "Embedding"));
  absl::Status status = AddParameter(*embedding, weights, "weight",
                                     {num_embeddings, embedding_dim});
  if (!status.ok()) return status;
  return embedding;
}

int64_t Embedding::num_embeddings() const {
  return weight("weight")->shape()[0];
}

bool Embedding::ReadsOwnWeights() const {
  const casting::Weight& table = *weight("weight");
  return table.options().compute_copy ==
             casting::ComputeCopyPolicy::kTransient ||
         table.serving_mapped() || !table.has_compute_copy();
}

at::Tensor Embedding::Forward(ForwardContext& context,
                              const at::Tensor& ids) const {
  context.NoteActivationRows(ids.numel());
  ModuleCall call(*this, context);
  TORCH_CHECK_TYPE(
      ids.scalar_type() == at::kLong || ids.scalar_type() == at::kInt,
      "embedding '", name(), "': ids must be int64 or int32, got ",
      ids.scalar_type());
  const int64_t num = num_embeddings();
  if (ids.numel() > 0) {
    const int64_t min_id = ids.min().item<int64_t>();
    const int64_t max_id = ids.max().item<int64_t>();
    const int64_t bad = min_id < 0 ? min_id : max_id;
    TORCH_CHECK_INDEX(min_id >= 0 && max_id < num, "embedding '", name(),
                      "': id ", bad, " is outside the table of ", num, " rows");
  }
  if (!ReadsOwnWeights()) return at::embedding(Param(context, "weight"), ids);
  casting::Weight& table = *weight("weight");
  absl::StatusOr<at::Tensor> rows = table.GatherRows(ids);
  if (!rows.ok()) throw WeightUnavailableError(table.name(), rows.status());
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(rows->size(1));
  return rows->view(shape);
}

LayerNorm::LayerNorm(std::string name, double eps)
    : Module(std::move(name), "LayerNorm"), eps_(eps) {}

absl::StatusOr<std::unique_ptr<LayerNorm>> LayerNorm::Create(
    std::string name, const WeightFactory& weights, int64_t dim, double eps) {
  std::unique_ptr<LayerNorm> norm(new LayerNorm(std::move(name), eps));
  absl::Status status = AddParameter(*norm, weights, "weight", {dim});
  if (status.ok()) status = AddOptionalParameter(*norm, weights, "bias", {dim});
  if (!status.ok()) return status;
  return norm;
}

at::Tensor LayerNorm::Forward(ForwardContext& context,
                              const at::Tensor& x) const {
  ModuleCall call(*this, context);
  const at::Tensor& gamma = Param(context, "weight");
  return at::layer_norm(x, {gamma.size(0)}, gamma,
                        OptionalParam(context, "bias"), eps_);
}

RMSNorm::RMSNorm(std::string name, double eps)
    : Module(std::move(name), "RMSNorm"), eps_(eps) {}

absl::StatusOr<std::unique_ptr<RMSNorm>> RMSNorm::Create(
    std::string name, const WeightFactory& weights, int64_t dim, double eps) {
  std::unique_ptr<RMSNorm> norm(new RMSNorm(std::move(name), eps));
  absl::Status status = AddParameter(*norm, weights, "weight", {dim});
  if (!status.ok()) return status;
  return norm;
}

at::Tensor RMSNorm::Forward(ForwardContext& context,
                            const at::Tensor& x) const {
  ModuleCall call(*this, context);
  const at::Tensor& gamma = Param(context, "weight");
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor inv_rms = at::rsqrt(x32.pow(2).mean({-1}, true) + eps_);
  return gamma * (x32 * inv_rms).to(x.scalar_type());
}

Conv2d::Conv2d(std::string name, int64_t stride, int64_t padding)
    : Module(std::move(name), "Conv2d"), stride_(stride), padding_(padding) {}

absl::StatusOr<std::unique_ptr<Conv2d>> Conv2d::Create(
    std::string name, const WeightFactory& weights, const Options& options) {
  std::unique_ptr<Conv2d> conv(
      new Conv2d(std::move(name), options.stride, options.padding));
  absl::Status status =
      AddParameter(*conv, weights, "weight",
                   {options.out_channels, options.in_channels,
                    options.kernel_size, options.kernel_size});
  if (status.ok() && options.bias) {
    status = AddParameter(*conv, weights, "bias", {options.out_channels});
  }
  if (!status.ok()) return status;
  return conv;
}

at::Tensor Conv2d::Forward(ForwardContext& context, const at::Tensor& x) const {
  ModuleCall call(*this, context);
  return at::conv2d(x, Param(context, "weight"), OptionalParam(context, "bias"),
                    {stride_, stride_}, {padding_, padding_});
}

}  // namespace castserve::models
