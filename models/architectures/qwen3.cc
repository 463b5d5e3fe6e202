// Qwen3 (Qwen3ForCausalLM, model_type "qwen3"): Llama's blocks with an
// RMSNorm over each head of q and k before the rotation (q_norm, k_norm),
// attention biases only when attention_bias says so, an explicit head_dim,
// and, with use_sliding_window, sliding layers as layer_types lists them
// (by default those from max_window_layers on).
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

// Which layers slide: none without use_sliding_window, else layer_types
// or layer >= max_window_layers; the window, 0 when none slides.
absl::Status ReadSlidingWindows(const HfConfig& config, DecoderSpec& spec) {
  SetUniformLayers(spec, /*sliding_window=*/0);
  auto enabled = config.GetBool("use_sliding_window", false);
  if (!enabled.ok() || !*enabled) return enabled.status();
  auto window = config.GetSize("sliding_window");
  auto first = config.GetInt("max_window_layers", spec.num_hidden_layers);
  if (!window.ok()) return window.status();
  if (!first.ok()) return first.status();
  std::vector<bool> fallback;
  for (int64_t i = 0; i < spec.num_hidden_layers; ++i) {
    fallback.push_back(i >= *first);
  }
  auto sliding = ReadSlidingLayers(config, spec.num_hidden_layers, fallback);
  if (!sliding.ok()) return sliding.status();
  for (int64_t i = 0; i < spec.num_hidden_layers; ++i) {
    if ((*sliding)[i]) spec.layers[i].sliding_window = *window;
  }
  return absl::OkStatus();
}

absl::StatusOr<DecoderSpec> ReadQwen3Spec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "qwen3";
  spec.class_prefix = "Qwen3";
  spec.names.q_norm = "q_norm";
  spec.names.k_norm = "k_norm";
  absl::Status status = ReadDecoderBasics(config, spec);
  if (!status.ok()) return status;
  auto attention_bias = config.GetBool("attention_bias", false);
  if (!attention_bias.ok()) return attention_bias.status();
  spec.qkv_bias = spec.o_bias = *attention_bias;
  absl::StatusOr<DecoderRope> rope = ReadFlatDecoderRope(config, spec.head_dim);
  if (!rope.ok()) return rope.status();
  spec.ropes = {*std::move(rope)};
  status = ReadSlidingWindows(config, spec);
  if (!status.ok()) return status;
  return spec;
}

const DecoderRegistration kRegistration("qwen3", &ReadQwen3Spec);

}  // namespace
}  // namespace castserve::models
