// RotaryTable: one decoder rotary table (DecoderRope) made ready for
// forwards: its inverse frequencies on the model's device, the cos/sin for
// a forward's positions (LongRoPE's short or long factors chosen by the
// forward's last position, as transformers does), and the rotation of the
// first rotary columns of each head (partial rotary leaves the rest).
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_MODELS_DECODER_ROTARY_TABLE_H_
#define CASTSERVE_MODELS_DECODER_ROTARY_TABLE_H_

#include <ATen/core/Tensor.h>

#include "casting/device/device.h"
#include "models/decoder/decoder_spec.h"
#include "models/layers/rotary.h"

namespace castserve::models {

class RotaryTable {
 public:
  // `rope` must be valid (DecoderSpec::Validate).
  RotaryTable(const DecoderRope& rope, casting::Device device);

  // cos and sin [batch, seq, rotary_dim] in `dtype` for integer
  // `positions` [batch, seq], multiplied by the attention factor.
  RopeTables Tables(const at::Tensor& positions, at::ScalarType dtype) const;

 private:
  const double attention_factor_;
  const int64_t original_max_positions_;  // LongRoPE only.
  const at::Tensor inv_freq_;             // Short factors for LongRoPE.
  const at::Tensor long_inv_freq_;        // Undefined unless LongRoPE.
};

// x [batch, heads, seq, head_dim] with its first tables.cos.size(-1)
// columns rotated (ApplyRotary) and the others passed through.
at::Tensor ApplyPartialRotary(const at::Tensor& x, const RopeTables& tables);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_DECODER_ROTARY_TABLE_H_
