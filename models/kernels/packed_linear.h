// A linear layer's f32 weight reordered once, at first use, into the blocked
// layout oneDNN's matmul reads, so that a product no longer reorders the
// plain [out, in] matrix on every call.
//
// LinearProduct (matmul.h) hands oneDNN the plain weight; oneDNN then copies
// it into its blocked layout inside every product. At the row counts of
// small embedding batches (16 to a few hundred rows against 384 x 1536) that
// copy costs as much as the multiplication: measured on this machine's Zen 5
// core, one thread, 16 x 384 -> 1536 took 270 us plain and 105 us packed,
// 128 rows 1040 us against 700 us (BENCHMARKS.md, "Embeddings against ONNX
// Runtime"). ONNX Runtime packs its constant weights at session start the
// same way.
//
// The packed copy is a second copy of the weight (same f32 values, another
// layout), owned by the caller; nothing here keeps a reference to the plain
// tensor. Results equal at::linear's up to summation order (~1e-6
// relative).
//
// Immutable after Pack; Apply is thread-safe.
#ifndef CASTSERVE_MODELS_KERNELS_PACKED_LINEAR_H_
#define CASTSERVE_MODELS_KERNELS_PACKED_LINEAR_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "models/layers/activation.h"

namespace castserve::models {

class PackedLinear {
 public:
  // True when this LibTorch has oneDNN's packed linear operators
  // (mkldnn::_reorder_linear_weight, mkldnn::_linear_pointwise), as the
  // PyPI CPU wheel does. Pack must not be called otherwise.
  static bool Available();

  // Packs `weight` f32 [out, in] on the CPU and keeps `bias` f32 [out] (or
  // undefined: none). Throws c10::Error on another dtype or device.
  static PackedLinear Pack(const at::Tensor& weight, const at::Tensor& bias);

  PackedLinear() = default;

  // y = x W^T + b, then `activation`, for `x` f32 [..., in] on the CPU:
  // [..., out]. GELU (erf and tanh), SiLU and ReLU run as oneDNN post-ops
  // on the accumulator; quick GELU after the product (Activate).
  at::Tensor Apply(const at::Tensor& x,
                   std::optional<Activation> activation = std::nullopt) const;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  // Bytes of the packed copy (the bias excluded).
  int64_t packed_bytes() const { return in_features_ * out_features_ * 4; }

 private:
  at::Tensor packed_;  // oneDNN's opaque layout (at::kMkldnn).
  at::Tensor bias_;
  int64_t in_features_ = 0;
  int64_t out_features_ = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_KERNELS_PACKED_LINEAR_H_
