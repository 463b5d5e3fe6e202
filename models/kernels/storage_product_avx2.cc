// AVX2 product kernels (8 f32 lanes). Compiled with -mavx2 -mf16c -mfma;
// only called after a CPU check.
#include <immintrin.h>

#include <cstdint>

#include "models/kernels/storage_product_kernels.h"
#include "models/kernels/storage_product_simd.h"

namespace castserve::models::internal {
namespace {

struct Avx2ProductOps {
  static constexpr int kLanes = 8;
  using Vec = __m256;

  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec LoadX(const float* x) { return _mm256_loadu_ps(x); }
  static Vec Fma(Vec a, Vec b, Vec acc) { return _mm256_fmadd_ps(a, b, acc); }
  static float Sum(Vec v) {
    const __m128 half =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
  }

  // fp8 as f16 bit patterns, as in storage_product_avx512.cc.
  template <ElementType kType>
  static Vec LoadWeight(const uint8_t* src) {
    if constexpr (kType == ElementType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
    } else if constexpr (kType == ElementType::kBF16) {
      const __m256i words = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
    } else if constexpr (kType == ElementType::kF16) {
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    } else {
      static_assert(
          kType == ElementType::kF8E5M2 || kType == ElementType::kF8E4M3FN,
          "a new element type needs its load here");
      const __m128i codes = _mm_cvtepu8_epi16(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
      if constexpr (kType == ElementType::kF8E5M2) {
        return _mm256_cvtph_ps(_mm_slli_epi16(codes, 8));
      } else {
        const __m128i magnitude = _mm_and_si128(codes, _mm_set1_epi16(0x7F));
        const __m128i sign =
            _mm_slli_epi16(_mm_and_si128(codes, _mm_set1_epi16(0x80)), 8);
        const __m256 value =
            _mm256_cvtph_ps(_mm_or_si128(_mm_slli_epi16(magnitude, 7), sign));
        const __m256i is_nan = _mm256_cvtepi16_epi32(
            _mm_cmpeq_epi16(magnitude, _mm_set1_epi16(0x7F)));
        return _mm256_blendv_ps(value, _mm256_set1_ps(__builtin_nanf("")),
                                _mm256_castsi256_ps(is_nan));
      }
    }
  }

  template <ElementType kType>
  static constexpr float WeightFactor() {
    return kType == ElementType::kF8E4M3FN ? 256.0f : 1.0f;
  }
};

}  // namespace

const ProductKernelTable* Avx2ProductKernels() {
  static const ProductKernelTable table =
      MakeProductKernelTable<Avx2ProductOps>("avx2");
  return &table;
}

}  // namespace castserve::models::internal
