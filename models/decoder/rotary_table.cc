#include "models/decoder/rotary_table.h"

#include <ATen/ATen.h>

#include <vector>

#include "casting/device/device_codec.h"

namespace castserve::models {
namespace {

// LongRoPE: 1 / (factor_i * theta^(2i / dim)), in f32 as transformers.
at::Tensor LongRopeInverseFrequencies(const RopeOptions& options,
                                      const std::vector<double>& factors) {
  at::Tensor exponents =
      at::arange(0, options.head_dim, 2, at::kLong).to(at::kFloat) /
      static_cast<float>(options.head_dim);
  at::Tensor ext = at::tensor(factors, at::kDouble).to(at::kFloat);
  return 1.0 / (ext * at::pow(static_cast<float>(options.theta), exponents));
}

}  // namespace

RotaryTable::RotaryTable(const DecoderRope& rope, casting::Device device)
    : attention_factor_(rope.attention_factor),
      original_max_positions_(rope.options.original_max_position_embeddings),
      inv_freq_(casting::ToDevice(
          rope.short_factor.empty()
              ? RopeInverseFrequencies(rope.options)
              : LongRopeInverseFrequencies(rope.options, rope.short_factor),
          device)),
      long_inv_freq_(
          rope.long_factor.empty()
              ? at::Tensor()
              : casting::ToDevice(
                    LongRopeInverseFrequencies(rope.options, rope.long_factor),
                    device)) {}

RopeTables RotaryTable::Tables(const at::Tensor& positions,
                               at::ScalarType dtype) const {
  const bool long_factors =
      long_inv_freq_.defined() &&
      positions.max().item<int64_t>() + 1 > original_max_positions_;
  RopeTables tables =
      RopeCosSin(long_factors ? long_inv_freq_ : inv_freq_, positions);
  if (attention_factor_ != 1.0) {
    tables.cos = tables.cos * attention_factor_;
    tables.sin = tables.sin * attention_factor_;
  }
  return {tables.cos.to(dtype), tables.sin.to(dtype)};
}

at::Tensor ApplyPartialRotary(const at::Tensor& x, const RopeTables& tables) {
  const int64_t rotary = tables.cos.size(-1), head_dim = x.size(-1);
  if (rotary == head_dim) return ApplyRotary(x, tables);
  return at::cat({ApplyRotary(x.narrow(-1, 0, rotary), tables),
                  x.narrow(-1, rotary, head_dim - rotary)},
                 -1);
}

}  // namespace castserve::models
