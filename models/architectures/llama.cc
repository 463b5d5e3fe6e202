// Llama (LlamaForCausalLM, model_type "llama"): grouped-query attention,
// rotary embeddings (default, linear or Llama 3.1 scaling), RMSNorm before
// attention and MLP, a gated SiLU MLP, optional attention and MLP biases
// (attention_bias, mlp_bias), optional tied embeddings.
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<DecoderSpec> ReadLlamaSpec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "llama";
  spec.class_prefix = "Llama";
  absl::Status status = ReadDecoderBasics(config, spec);
  if (!status.ok()) return status;
  auto attention_bias = config.GetBool("attention_bias", false);
  if (!attention_bias.ok()) return attention_bias.status();
  auto mlp_bias = config.GetBool("mlp_bias", false);
  if (!mlp_bias.ok()) return mlp_bias.status();
  spec.qkv_bias = spec.o_bias = *attention_bias;
  spec.mlp_bias = *mlp_bias;
  absl::StatusOr<DecoderRope> rope = ReadFlatDecoderRope(config, spec.head_dim);
  if (!rope.ok()) return rope.status();
  spec.ropes = {*std::move(rope)};
  SetUniformLayers(spec, /*sliding_window=*/0);
  return spec;
}

const DecoderRegistration kRegistration("llama", &ReadLlamaSpec);

}  // namespace
}  // namespace castserve::models
