// Rotary position embeddings (RoPE) for the Llama family, written from the
// math of Su et al. (RoFormer) and Meta's Llama 3 frequency scaling.
//
// Conventions (those of the Hugging Face checkpoints castserve loads): the
// head dimension is split in two halves, not interleaved pairs; element i of
// the first half rotates with element i of the second half at frequency
// inv_freq[i] = theta^(-2i / head_dim).
//
// Everything here is a pure function of its arguments: thread-safe.
#ifndef CASTSERVE_MODELS_LAYERS_ROTARY_H_
#define CASTSERVE_MODELS_LAYERS_ROTARY_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace castserve::models {

enum class RopeType {
  kDefault,  // Plain RoPE.
  kLinear,   // Positions divided by `factor` (position interpolation).
  kLlama3,   // Llama 3.1: low frequencies divided by `factor`, high kept,
             // a smooth blend between.
};

struct RopeOptions {
  int64_t head_dim = 0;  // Even, > 0.
  double theta = 10000.0;
  RopeType type = RopeType::kDefault;
  // kLinear and kLlama3.
  double factor = 1.0;
  // kLlama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  // InvalidArgument naming the bad field: odd or non-positive head_dim,
  // theta <= 0, factor <= 0, low_freq_factor >= high_freq_factor, ...
  absl::Status Validate() const;
};

// "default", "linear", "llama3" (the `rope_type` / legacy `type` field of a
// config.json's `rope_scaling`). InvalidArgument listing the supported names
// otherwise ("dynamic", "yarn", ... are not supported).
absl::Status ParseRopeType(const std::string& name, RopeType* type);

// The inverse frequencies, f32 [head_dim / 2], with the scaling applied.
// `options` must be valid (TORCH_CHECK otherwise).
at::Tensor RopeInverseFrequencies(const RopeOptions& options);

// cos and sin tables for `positions` (integer [batch, seq]): each f32
// [batch, seq, head_dim], the angle of column j being
// positions * inv_freq[j mod head_dim / 2]. Computed in f32 whatever the
// compute dtype; cast by the caller.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};
RopeTables RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions);

// Rotates `x` [batch, heads, seq, head_dim] by the tables from RopeCosSin
// (cast to x's dtype): x * cos + rotate_half(x) * sin, where rotate_half
// maps (a, b) halves to (-b, a).
at::Tensor ApplyRotary(const at::Tensor& x, const RopeTables& tables);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LAYERS_ROTARY_H_
