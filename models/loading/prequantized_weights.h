// PrequantizedWeights: which tensors of a checkpoint folder are pre-quantized
// fp8 weights, in which castserve storage format, with which scale tensor —
// read from config.json's `quantization_config` and checked against the
// checkpoint's header, once, when a folder loads
// (models/loading/model_loader.h).
//
// Layouts read (each a storage format of casting/codec/storage_format.h, used
// as the file holds it: no decode and re-encode):
//   - quant_method "fp8" (transformers' FineGrainedFP8Config, the
//     Qwen3-*-FP8 / DeepSeek-V3 layout): `<m>.weight` F8_E4M3 [out, in] and
//     `<m>.weight_scale_inv` of shape [ceil(out / b0), ceil(in / b1)] for
//     weight_block_size [b0, b1] (per_block_<b0>x<b1>), or [] / [1] without
//     one (per_tensor). dequantized = fp8 * weight_scale_inv.
//   - quant_method "compressed-tensors", format "float-quantized" (or
//     "naive-quantized") with fp8 weights (type float, num_bits 8,
//     symmetric) of strategy "tensor" (`weight_scale` [1] or []), "channel"
//     ([out, 1] or [out]) or "block" (as fp8's, block_structure [b0, b1]):
//     the *-FP8-dynamic / W8A16 releases. dequantized = fp8 * weight_scale.
//   - quant_method "fbgemm_fp8": `weight_scale` [out, 1] per channel.
//     dequantized = fp8 * weight_scale.
// Scales may be F32, BF16 or F16; castserve keeps them as f32.
//
// Refused, InvalidArgument naming the field or the tensor (never served
// with scales ignored): another quant_method; a field of the
// quantization_config castserve does not know; a strategy, format, number
// of bits, asymmetric weights, static activation scales, KV-cache, sparsity
// or transform schemes, ue8m0 scales, fp4 experts; a scale tensor
// (`*.weight_scale_inv`, `*.weight_scale`, `*.input_scale`, ...) that no
// fp8 weight of the layout claims, a scale of the wrong shape, and an fp8
// weight without its scale. Without a quantization_config, any scale tensor
// is refused. Which modules a config leaves unquantized (ignore,
// modules_to_not_convert) is read from the tensors themselves: a weight
// with a scale is quantized, one without is plain in its own dtype.
//
// Dynamic activation quantization (per-token input scales computed at run
// time) is not applied: castserve computes in the compute dtype; note()
// says so, for the load log line and the model's config parameters.
//
// Value type; immutable after Read, safe to read concurrently.
#ifndef CASTSERVE_MODELS_LOADING_PREQUANTIZED_WEIGHTS_H_
#define CASTSERVE_MODELS_LOADING_PREQUANTIZED_WEIGHTS_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/codec/storage_format.h"
#include "casting/formats/checkpoint.h"
#include "models/loading/hf_config.h"

namespace castserve::models {

// One pre-quantized weight: its storage format and its scales' tensor.
struct PrequantizedWeight {
  casting::StorageFormat format;
  std::string scales_key;
};

class PrequantizedWeights {
 public:
  // None: a folder without pre-quantized weights.
  PrequantizedWeights() = default;

  // Reads `config`'s quantization_config against `checkpoint`'s tensors.
  static absl::StatusOr<PrequantizedWeights> Read(
      const HfConfig& config, const casting::Checkpoint& checkpoint);

  // The weight stored under checkpoint key `key`, or nullptr when that
  // tensor is not pre-quantized.
  const PrequantizedWeight* Find(absl::string_view key) const;

  bool empty() const { return weights_.empty(); }
  size_t size() const { return weights_.size(); }

  // One line for the load log and the model's config parameters, e.g.
  // "fp8 (per_block_128x128) weights in their file format; dynamic
  // activation quantization not applied: layers compute in the compute
  // dtype"; empty without pre-quantized weights.
  const std::string& note() const { return note_; }

 private:
  std::map<std::string, PrequantizedWeight, std::less<>> weights_;
  std::string note_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_PREQUANTIZED_WEIGHTS_H_
