// The paged-attention loop in AVX2 lanes (8 f32).
#include <immintrin.h>

#include "models/kernels/paged_attention_exp.h"
#include "models/kernels/paged_attention_kernels.h"
#include "models/kernels/paged_attention_simd.h"

namespace castserve::models::internal {
namespace {

struct Avx2Ops {
  static constexpr int kLanes = 8;
  using Vec = __m256;
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Set(float x) { return _mm256_set1_ps(x); }
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  template <ElementType kType>
  static Vec LoadKv(const uint8_t* p) {
    return casting::internal::LoadWide8<kType>(p);
  }
  static Vec Fma(Vec a, Vec b, Vec acc) { return _mm256_fmadd_ps(a, b, acc); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static Vec Round(Vec x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static Vec Pow2(Vec n) {
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
  }
  static Vec Exp(Vec x) { return ExpNonPositive<Avx2Ops>(x); }
  static float Sum(Vec v) {
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float MaxOf(Vec v) {
    __m128 m =
        _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
};

}  // namespace

PagedAttentionFn Avx2PagedAttention(casting::ElementType element) {
  return PagedAttentionFor<Avx2Ops>(element);
}

}  // namespace castserve::models::internal
