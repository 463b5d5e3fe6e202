// The paged-attention loop in AVX-512 lanes (16 f32).
#include <immintrin.h>

#include "models/kernels/paged_attention_exp.h"
#include "models/kernels/paged_attention_kernels.h"
#include "models/kernels/paged_attention_simd.h"

namespace castserve::models::internal {
namespace {

struct Avx512Ops {
  static constexpr int kLanes = 16;
  using Vec = __m512;
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Set(float x) { return _mm512_set1_ps(x); }
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  template <ElementType kType>
  static Vec LoadKv(const uint8_t* p) {
    return casting::internal::LoadWide16<kType>(p);
  }
  static Vec Fma(Vec a, Vec b, Vec acc) { return _mm512_fmadd_ps(a, b, acc); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static Vec Round(Vec x) {
    return _mm512_roundscale_ps(x,
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static Vec Pow2(Vec n) {
    const __m512i bits = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(bits);
  }
  static Vec Exp(Vec x) { return ExpNonPositive<Avx512Ops>(x); }
  static float Sum(Vec v) { return _mm512_reduce_add_ps(v); }
  static float MaxOf(Vec v) { return _mm512_reduce_max_ps(v); }
};

}  // namespace

PagedAttentionFn Avx512PagedAttention(casting::ElementType element) {
  return PagedAttentionFor<Avx512Ops>(element);
}

}  // namespace castserve::models::internal
