// Phi-3 (Phi3ForCausalLM, model_type "phi3"; also Phi-3.5 and Phi-4-mini):
// Llama's blocks with q, k and v in one fused "qkv_proj" and gate and up in
// one "gate_up_proj" (gate first), no biases, rotary over the first
// partial_rotary_factor of each head, LongRoPE scaling (short factors up to
// original_max_position_embeddings, long ones beyond), and an optional
// sliding window on every layer.
//
// Generation stays within original_max_position_embeddings under LongRoPE:
// transformers recomputes the whole cache with the long factors when a
// sequence crosses it, which a KV cache of rotated keys cannot do.
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<DecoderSpec> ReadPhi3Spec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "phi3";
  spec.class_prefix = "Phi3";
  spec.names.qkv = "qkv_proj";
  spec.names.gate_up = "gate_up_proj";
  absl::Status status = ReadDecoderBasics(config, spec);
  if (!status.ok()) return status;
  auto window = config.GetSize("sliding_window", 0);
  if (!window.ok()) return window.status();
  absl::StatusOr<DecoderRope> rope = ReadFlatDecoderRope(config, spec.head_dim);
  if (!rope.ok()) return rope.status();
  if (!rope->long_factor.empty()) {
    spec.max_generated_positions =
        rope->options.original_max_position_embeddings;
  }
  spec.ropes = {*std::move(rope)};
  SetUniformLayers(spec, *window);
  return spec;
}

const DecoderRegistration kRegistration("phi3", &ReadPhi3Spec);

}  // namespace
}  // namespace castserve::models
