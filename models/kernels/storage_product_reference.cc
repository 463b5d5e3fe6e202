// Scalar reference product kernels: one lane, each weight converted by the
// codec's reference conversion (casting::ElementBitsToF32). The SIMD
// kernels are tested against decode-then-matmul and against these.
#include <cstdint>

#include "models/kernels/storage_product_kernels.h"
#include "models/kernels/storage_product_simd.h"

namespace castserve::models::internal {
namespace {

struct ReferenceProductOps {
  static constexpr int kLanes = 1;
  using Vec = float;

  static Vec Zero() { return 0.0f; }
  static Vec LoadX(const float* x) { return *x; }
  static Vec Fma(Vec a, Vec b, Vec acc) { return a * b + acc; }
  static float Sum(Vec v) { return v; }
  template <ElementType kType>
  static Vec LoadWeight(const uint8_t* src) {
    return ScalarWeight<kType>(src);
  }
  template <ElementType kType>
  static constexpr float WeightFactor() {
    return 1.0f;
  }
};

}  // namespace

const ProductKernelTable& ReferenceProductKernels() {
  static const ProductKernelTable table =
      MakeProductKernelTable<ReferenceProductOps>("reference");
  return table;
}

}  // namespace castserve::models::internal
