// AVX-512 product kernels (16 f32 lanes). Compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx2 -mf16c -mfma; only called after a CPU check.
#include <immintrin.h>

#include <cstdint>

#include "models/kernels/storage_product_kernels.h"
#include "models/kernels/storage_product_simd.h"

namespace castserve::models::internal {
namespace {

struct Avx512ProductOps {
  static constexpr int kLanes = 16;
  using Vec = __m512;

  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec LoadX(const float* x) { return _mm512_loadu_ps(x); }
  static Vec Fma(Vec a, Vec b, Vec acc) { return _mm512_fmadd_ps(a, b, acc); }
  static float Sum(Vec v) { return _mm512_reduce_add_ps(v); }

  // fp8 codes widened to 16-bit lanes become f16 bit patterns: E5M2 is
  // the top byte of an F16; E4M3FN's 7-bit magnitude shifted left by 7
  // is an F16 of the same mantissa with its exponent biased 15 instead of 7,
  // i.e. the value divided by 2^8 (WeightFactor), subnormals included; its
  // one NaN magnitude (0x7F) is set apart.
  template <ElementType kType>
  static Vec LoadWeight(const uint8_t* src) {
    if constexpr (kType == ElementType::kF32) {
      return _mm512_loadu_ps(src);
    } else if constexpr (kType == ElementType::kBF16) {
      const __m512i words = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
    } else if constexpr (kType == ElementType::kF16) {
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    } else {
      static_assert(
          kType == ElementType::kF8E5M2 || kType == ElementType::kF8E4M3FN,
          "a new element type needs its load here");
      const __m256i codes = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      if constexpr (kType == ElementType::kF8E5M2) {
        return _mm512_cvtph_ps(_mm256_slli_epi16(codes, 8));
      } else {
        const __m256i magnitude =
            _mm256_and_si256(codes, _mm256_set1_epi16(0x7F));
        const __m256i sign = _mm256_slli_epi16(
            _mm256_and_si256(codes, _mm256_set1_epi16(0x80)), 8);
        const __m512 value = _mm512_cvtph_ps(
            _mm256_or_si256(_mm256_slli_epi16(magnitude, 7), sign));
        const __mmask16 is_nan =
            _mm256_cmpeq_epi16_mask(magnitude, _mm256_set1_epi16(0x7F));
        return _mm512_mask_mov_ps(value, is_nan,
                                  _mm512_set1_ps(__builtin_nanf("")));
      }
    }
  }

  template <ElementType kType>
  static constexpr float WeightFactor() {
    return kType == ElementType::kF8E4M3FN ? 256.0f : 1.0f;
  }
};

}  // namespace

const ProductKernelTable* Avx512ProductKernels() {
  static const ProductKernelTable table =
      MakeProductKernelTable<Avx512ProductOps>("avx512");
  return &table;
}

}  // namespace castserve::models::internal
