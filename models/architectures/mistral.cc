// Mistral (MistralForCausalLM, model_type "mistral"): Llama's blocks
// without biases, every layer attending within "sliding_window" tokens
// (absent or null: globally).
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<DecoderSpec> ReadMistralSpec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "mistral";
  spec.class_prefix = "Mistral";
  absl::Status status = ReadDecoderBasics(config, spec);
  if (!status.ok()) return status;
  auto window = config.GetSize("sliding_window", 0);
  if (!window.ok()) return window.status();
  absl::StatusOr<DecoderRope> rope = ReadFlatDecoderRope(config, spec.head_dim);
  if (!rope.ok()) return rope.status();
  spec.ropes = {*std::move(rope)};
  SetUniformLayers(spec, *window);
  return spec;
}

const DecoderRegistration kRegistration("mistral", &ReadMistralSpec);

}  // namespace
}  // namespace castserve::models
