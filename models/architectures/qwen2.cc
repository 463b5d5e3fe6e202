// Qwen2 (Qwen2ForCausalLM, model_type "qwen2"): Llama's blocks with biases
// on q, k and v (not on o), usually tied embeddings. Its sliding-window
// option (use_sliding_window) is refused.
#include "absl/strings/str_cat.h"
#include "models/decoder/decoder_model.h"

namespace castserve::models {
namespace {

absl::StatusOr<DecoderSpec> ReadQwen2Spec(const HfConfig& config) {
  DecoderSpec spec;
  spec.model_type = "qwen2";
  spec.class_prefix = "Qwen2";
  absl::Status status = ReadDecoderBasics(config, spec);
  if (!status.ok()) return status;
  spec.qkv_bias = true;
  auto sliding = config.GetBool("use_sliding_window", false);
  if (!sliding.ok()) return sliding.status();
  if (*sliding) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.label(), ": use_sliding_window is not supported for qwen2"));
  }
  absl::StatusOr<DecoderRope> rope = ReadFlatDecoderRope(config, spec.head_dim);
  if (!rope.ok()) return rope.status();
  spec.ropes = {*std::move(rope)};
  SetUniformLayers(spec, /*sliding_window=*/0);
  return spec;
}

const DecoderRegistration kRegistration("qwen2", &ReadQwen2Spec);

}  // namespace
}  // namespace castserve::models
