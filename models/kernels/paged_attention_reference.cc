// The scalar reference of the paged-attention loop: one lane, std::exp.
#include <cmath>
#include <cstring>

#include "models/kernels/paged_attention_kernels.h"
#include "models/kernels/paged_attention_simd.h"

namespace castserve::models::internal {
namespace {

struct ScalarOps {
  static constexpr int kLanes = 1;
  using Vec = float;
  static Vec Zero() { return 0.0f; }
  static Vec Set(float x) { return x; }
  static Vec Load(const float* p) { return *p; }
  static void Store(float* p, Vec v) { *p = v; }
  template <ElementType kType>
  static Vec LoadKv(const uint8_t* p) {
    return ScalarKv<kType>(p);
  }
  static Vec Fma(Vec a, Vec b, Vec acc) { return a * b + acc; }
  static Vec Max(Vec a, Vec b) { return a > b ? a : b; }
  static Vec Exp(Vec x) { return std::exp(x); }
  static float Sum(Vec v) { return v; }
  static float MaxOf(Vec v) { return v; }
};

}  // namespace

PagedAttentionFn ReferencePagedAttention(casting::ElementType element) {
  return PagedAttentionFor<ScalarOps>(element);
}

}  // namespace castserve::models::internal
