#include "models/layers/rotary.h"

#include <ATen/ATen.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace castserve::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Llama 3.1 scaling of one frequency: wavelengths shorter than
// original / high_freq_factor keep their frequency, longer than
// original / low_freq_factor are slowed down by `factor`, and the band
// between blends linearly in (original / wavelength).
double ScaleLlama3Frequency(double freq, const RopeOptions& options) {
  const double original =
      static_cast<double>(options.original_max_position_embeddings);
  const double high_freq_wavelen = original / options.high_freq_factor;
  const double low_freq_wavelen = original / options.low_freq_factor;
  const double wavelen = 2 * kPi / freq;
  if (wavelen < high_freq_wavelen) return freq;
  if (wavelen > low_freq_wavelen) return freq / options.factor;
  const double smooth = (original / wavelen - options.low_freq_factor) /
                        (options.high_freq_factor - options.low_freq_factor);
  return (1 - smooth) * freq / options.factor + smooth * freq;
}

}  // namespace

absl::Status RopeOptions::Validate() const {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotary head_dim must be positive and even, got ", head_dim));
  }
  if (!(theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_theta must be positive, got ", theta));
  }
  if (type == RopeType::kDefault) return absl::OkStatus();
  if (!(factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling.factor must be positive, got ", factor));
  }
  if (type != RopeType::kLlama3) return absl::OkStatus();
  if (!(low_freq_factor > 0) || !(high_freq_factor > low_freq_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_scaling needs 0 < low_freq_factor < high_freq_factor, got ",
        low_freq_factor, " and ", high_freq_factor));
  }
  if (original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_scaling.original_max_position_embeddings must be positive, "
        "got ",
        original_max_position_embeddings));
  }
  return absl::OkStatus();
}

absl::Status ParseRopeType(const std::string& name, RopeType* type) {
  if (name == "default") {
    *type = RopeType::kDefault;
  } else if (name == "linear") {
    *type = RopeType::kLinear;
  } else if (name == "llama3") {
    *type = RopeType::kLlama3;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported rope_scaling type '", name,
                     "'; supported: default, linear, llama3"));
  }
  return absl::OkStatus();
}

at::Tensor RopeInverseFrequencies(const RopeOptions& options) {
  const absl::Status valid = options.Validate();
  TORCH_CHECK(valid.ok(), std::string(valid.message()));
  // theta^(-2i/d) computed in f32 as the checkpoints' reference code does,
  // so that the tables agree to the last bit where possible.
  at::Tensor exponents =
      at::arange(0, options.head_dim, 2, at::kLong).to(at::kFloat) /
      static_cast<float>(options.head_dim);
  at::Tensor inv_freq =
      1.0 / at::pow(static_cast<float>(options.theta), exponents);
  switch (options.type) {
    case RopeType::kDefault:
      return inv_freq;
    case RopeType::kLinear:
      return inv_freq / static_cast<float>(options.factor);
    case RopeType::kLlama3: {
      at::Tensor scaled = inv_freq.clone();
      float* data = scaled.data_ptr<float>();
      for (int64_t i = 0; i < scaled.numel(); ++i) {
        data[i] = static_cast<float>(ScaleLlama3Frequency(data[i], options));
      }
      return scaled;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown RopeType");
}

RopeTables RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions) {
  TORCH_CHECK(positions.dim() == 2, "rotary positions must be [batch, seq]");
  TORCH_CHECK(inv_freq.dim() == 1 && inv_freq.scalar_type() == at::kFloat,
              "rotary inverse frequencies must be f32 [head_dim / 2]");
  // [batch, seq, 1] * [half] -> [batch, seq, half]; one f32 product per
  // element, as an outer product.
  at::Tensor angles =
      positions.to(at::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
  at::Tensor full = at::cat({angles, angles}, -1);
  return {full.cos(), full.sin()};
}

at::Tensor ApplyRotary(const at::Tensor& x, const RopeTables& tables) {
  TORCH_CHECK(x.dim() == 4, "rotary input must be [batch, heads, seq, dim]");
  const int64_t half = x.size(-1) / 2;
  // [batch, seq, dim] -> [batch, 1, seq, dim] to broadcast over heads.
  at::Tensor cos = tables.cos.unsqueeze(1).to(x.scalar_type());
  at::Tensor sin = tables.sin.unsqueeze(1).to(x.scalar_type());
  TORCH_CHECK(cos.size(-1) == x.size(-1), "rotary tables have dim ",
              cos.size(-1), ", input has ", x.size(-1));
  at::Tensor rotated =
      at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace castserve::models
