#include "models/decoder/decoder_layer.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace castserve::models {

absl::StatusOr<std::unique_ptr<DecoderLayer>> DecoderLayer::Create(
    const DecoderSpec& spec, int64_t index, int window_index,
    const WeightFactory& weights) {
  const DecoderTensorNames& names = spec.names;
  const std::string name = absl::StrCat(names.layers, ".", index);
  auto layer = std::unique_ptr<DecoderLayer>(
      new DecoderLayer(name, spec.class_prefix + "DecoderLayer"));
  // A norm of this layer named `local` ("" = none).
  auto add_norm = [&](DecoderNormSlot& slot, const std::string& local) {
    return slot.Add(*layer, local.empty() ? "" : name + "." + local, spec,
                    spec.hidden_size, weights);
  };
  absl::Status status =
      add_norm(layer->attention_in_norm_, names.attention_in_norm);
  if (!status.ok()) return status;
  auto attention = DecoderAttention::Create(name + "." + names.attention, spec,
                                            index, window_index, weights);
  if (!attention.ok()) return attention.status();
  layer->attention_ = layer->AddChild(*std::move(attention));
  status = add_norm(layer->attention_out_norm_, names.attention_out_norm);
  if (status.ok()) status = add_norm(layer->mlp_in_norm_, names.mlp_in_norm);
  if (!status.ok()) return status;
  auto mlp = GatedMlp::Create(name + "." + names.mlp, spec, weights);
  if (!mlp.ok()) return mlp.status();
  layer->mlp_ = layer->AddChild(*std::move(mlp));
  status = add_norm(layer->mlp_out_norm_, names.mlp_out_norm);
  if (!status.ok()) return status;
  return layer;
}

at::Tensor DecoderLayer::Forward(ForwardContext& ctx, const at::Tensor& x,
                                 const DecoderStepInputs& inputs) const {
  ModuleCall call(*this, ctx);
  at::Tensor attended =
      attention_->Forward(ctx, attention_in_norm_.Forward(ctx, x), inputs);
  at::Tensor h = x + attention_out_norm_.Forward(ctx, attended);
  at::Tensor fed = mlp_->Forward(ctx, mlp_in_norm_.Forward(ctx, h));
  return h + mlp_out_norm_.Forward(ctx, fed);
}

}  // namespace castserve::models
