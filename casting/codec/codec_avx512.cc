// AVX-512 kernels (16 f32 lanes). Compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx2 -mf16c -mfma; only called after a CPU check.
#include <immintrin.h>

#include <cstdint>

#include "casting/codec/codec_internal.h"
#include "casting/codec/codec_simd.h"

namespace castserve::casting::internal {
namespace {

__m512i Set(uint32_t bits) { return _mm512_set1_epi32(static_cast<int>(bits)); }

template <ElementType kType>
__m512 DecodeFp8(__m512i codes) {
  constexpr Fp8Layout kLayout = Fp8LayoutOf<kType>();
  constexpr int m = kLayout.mantissa_bits;
  const __m512i sign =
      _mm512_slli_epi32(_mm512_and_si512(codes, Set(0x80)), 24);
  const __m512i magnitude = _mm512_and_si512(codes, Set(0x7F));
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(magnitude, 23 - m),
                                          Set(kLayout.RebiasBits()));
  const __m512 subnormal =
      _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude),
                    _mm512_castsi512_ps(Set(kLayout.SubnormalStepBits())));
  const __mmask16 is_subnormal =
      _mm512_cmplt_epi32_mask(magnitude, Set(1 << m));
  __m512i result = _mm512_mask_blend_epi32(is_subnormal, normal,
                                           _mm512_castps_si512(subnormal));
  if constexpr (kLayout.has_inf) {
    const __mmask16 is_inf =
        _mm512_cmpeq_epi32_mask(magnitude, Set(kLayout.inf_magnitude));
    result = _mm512_mask_mov_epi32(result, is_inf, Set(0x7F800000));
    const __mmask16 is_nan =
        _mm512_cmpgt_epi32_mask(magnitude, Set(kLayout.inf_magnitude));
    result = _mm512_mask_mov_epi32(result, is_nan, Set(0x7FC00000));
  } else {
    const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(magnitude, Set(0x7F));
    result = _mm512_mask_mov_epi32(result, is_nan, Set(0x7FC00000));
  }
  return _mm512_castsi512_ps(_mm512_or_si512(result, sign));
}

// Round-to-nearest-even with saturation; see codec.h for special values.
template <ElementType kType>
__m512i EncodeFp8(__m512 values) {
  constexpr Fp8Layout kLayout = Fp8LayoutOf<kType>();
  constexpr int kShift = 23 - kLayout.mantissa_bits;
  const __m512i bits = _mm512_castps_si512(values);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), Set(0x80));
  const __m512i abs = _mm512_and_si512(bits, Set(0x7FFFFFFF));
  const __m512i clamped = _mm512_min_epu32(abs, Set(kLayout.MaxFiniteBits()));
  // Normal range: round the f32 mantissa to m bits, then rebias.
  const __m512i odd =
      _mm512_and_si512(_mm512_srli_epi32(clamped, kShift), Set(1));
  const __m512i rounded = _mm512_add_epi32(
      _mm512_add_epi32(clamped, Set((1u << (kShift - 1)) - 1)), odd);
  const __m512i normal = _mm512_sub_epi32(
      _mm512_srli_epi32(rounded, kShift),
      Set(uint32_t(127 - kLayout.exponent_bias) << kLayout.mantissa_bits));
  // Subnormal range: let the FPU round to a multiple of the subnormal step.
  const __m512 magic = _mm512_castsi512_ps(Set(kLayout.SubnormalMagicBits()));
  const __m512i subnormal = _mm512_sub_epi32(
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(clamped), magic)),
      _mm512_castps_si512(magic));
  const __mmask16 is_subnormal =
      _mm512_cmplt_epi32_mask(clamped, Set(kLayout.MinNormalBits()));
  __m512i code = _mm512_mask_blend_epi32(is_subnormal, normal, subnormal);
  if constexpr (kLayout.has_inf) {
    const __mmask16 is_inf = _mm512_cmpeq_epi32_mask(abs, Set(0x7F800000));
    code = _mm512_mask_mov_epi32(code, is_inf, Set(kLayout.inf_magnitude));
  }
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, Set(0x7F800000));
  code = _mm512_mask_mov_epi32(code, is_nan, Set(kLayout.nan_magnitude));
  return _mm512_or_si512(code, sign);
}

__m512i RoundToBf16(__m512 values) {
  const __m512i bits = _mm512_castps_si512(values);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), Set(1));
  __m512i result = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, Set(0x7FFF)), odd), 16);
  const __m512i abs = _mm512_and_si512(bits, Set(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, Set(0x7F800000));
  const __m512i nan = _mm512_or_si512(
      _mm512_and_si512(_mm512_srli_epi32(bits, 16), Set(0x8000)), Set(0x7FC0));
  return _mm512_mask_mov_epi32(result, is_nan, nan);
}

struct Avx512Ops {
  static constexpr int kLanes = 16;
  using Vec = __m512;
  using Acc = __m512i;

  template <ElementType kType>
  static Vec Load(const uint8_t* src) {
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
      return DecodeFp8<kType>(_mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
    }
  }

  template <ElementType kType>
  static void Store(uint8_t* dst, Vec values) {
    if constexpr (kType == ElementType::kF32) {
      _mm512_storeu_ps(dst, values);
    } else if constexpr (kType == ElementType::kBF16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                          _mm512_cvtepi32_epi16(RoundToBf16(values)));
    } else if constexpr (kType == ElementType::kF16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                          _mm512_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT |
                                                      _MM_FROUND_NO_EXC));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                       _mm512_cvtepi32_epi8(EncodeFp8<kType>(values)));
    }
  }

  static Vec Set1(float value) { return _mm512_set1_ps(value); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }

  // Finite magnitudes compare like their bit patterns as unsigned integers.
  static Acc AbsMaxInit() { return _mm512_setzero_si512(); }
  static Acc AbsMaxStep(Acc acc, Vec values) {
    const __m512i abs =
        _mm512_and_si512(_mm512_castps_si512(values), Set(0x7FFFFFFF));
    const __mmask16 finite = _mm512_cmplt_epu32_mask(abs, Set(0x7F800000));
    return _mm512_mask_max_epu32(acc, finite, acc, abs);
  }
  static float AbsMaxReduce(Acc acc) {
    const uint32_t bits = _mm512_reduce_max_epu32(acc);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
};

}  // namespace

const KernelTable* Avx512Kernels() {
  static const KernelTable table = MakeKernelTable<Avx512Ops>("avx512");
  return &table;
}

}  // namespace castserve::casting::internal
