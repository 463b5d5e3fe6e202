// AVX2 kernels (8 f32 lanes). Compiled with -mavx2 -mf16c -mfma; only
// called after a CPU check. Same algorithms as codec_avx512.cc with vector
// masks instead of mask registers.
#include <immintrin.h>

#include <cstdint>

#include "casting/codec/codec_internal.h"
#include "casting/codec/codec_simd.h"

namespace castserve::casting::internal {
namespace {

__m256i Set(uint32_t bits) { return _mm256_set1_epi32(static_cast<int>(bits)); }

// Lanes of `if_true` where `mask` is all ones, else of `if_false`.
__m256i Select(__m256i mask, __m256i if_true, __m256i if_false) {
  return _mm256_blendv_epi8(if_false, if_true, mask);
}

// Signed compares are safe below: every operand is in [0, 2^31).
__m256i Less(__m256i a, __m256i b) { return _mm256_cmpgt_epi32(b, a); }

template <ElementType kType>
__m256 DecodeFp8(__m256i codes) {
  constexpr Fp8Layout kLayout = Fp8LayoutOf<kType>();
  constexpr int m = kLayout.mantissa_bits;
  const __m256i sign =
      _mm256_slli_epi32(_mm256_and_si256(codes, Set(0x80)), 24);
  const __m256i magnitude = _mm256_and_si256(codes, Set(0x7F));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(magnitude, 23 - m),
                                          Set(kLayout.RebiasBits()));
  const __m256 subnormal =
      _mm256_mul_ps(_mm256_cvtepi32_ps(magnitude),
                    _mm256_castsi256_ps(Set(kLayout.SubnormalStepBits())));
  __m256i result = Select(Less(magnitude, Set(1 << m)),
                          _mm256_castps_si256(subnormal), normal);
  if constexpr (kLayout.has_inf) {
    const __m256i inf = Set(kLayout.inf_magnitude);
    result =
        Select(_mm256_cmpeq_epi32(magnitude, inf), Set(0x7F800000), result);
    result =
        Select(_mm256_cmpgt_epi32(magnitude, inf), Set(0x7FC00000), result);
  } else {
    result = Select(_mm256_cmpeq_epi32(magnitude, Set(0x7F)), Set(0x7FC00000),
                    result);
  }
  return _mm256_castsi256_ps(_mm256_or_si256(result, sign));
}

// Round-to-nearest-even with saturation; see codec.h for special values.
template <ElementType kType>
__m256i EncodeFp8(__m256 values) {
  constexpr Fp8Layout kLayout = Fp8LayoutOf<kType>();
  constexpr int kShift = 23 - kLayout.mantissa_bits;
  const __m256i bits = _mm256_castps_si256(values);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), Set(0x80));
  const __m256i abs = _mm256_and_si256(bits, Set(0x7FFFFFFF));
  const __m256i clamped = _mm256_min_epu32(abs, Set(kLayout.MaxFiniteBits()));
  const __m256i odd =
      _mm256_and_si256(_mm256_srli_epi32(clamped, kShift), Set(1));
  const __m256i rounded = _mm256_add_epi32(
      _mm256_add_epi32(clamped, Set((1u << (kShift - 1)) - 1)), odd);
  const __m256i normal = _mm256_sub_epi32(
      _mm256_srli_epi32(rounded, kShift),
      Set(uint32_t(127 - kLayout.exponent_bias) << kLayout.mantissa_bits));
  const __m256 magic = _mm256_castsi256_ps(Set(kLayout.SubnormalMagicBits()));
  const __m256i subnormal = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(clamped), magic)),
      _mm256_castps_si256(magic));
  __m256i code =
      Select(Less(clamped, Set(kLayout.MinNormalBits())), subnormal, normal);
  if constexpr (kLayout.has_inf) {
    code = Select(_mm256_cmpeq_epi32(abs, Set(0x7F800000)),
                  Set(kLayout.inf_magnitude), code);
  }
  code = Select(_mm256_cmpgt_epi32(abs, Set(0x7F800000)),
                Set(kLayout.nan_magnitude), code);
  return _mm256_or_si256(code, sign);
}

__m256i RoundToBf16(__m256 values) {
  const __m256i bits = _mm256_castps_si256(values);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), Set(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, Set(0x7FFF)), odd), 16);
  const __m256i abs = _mm256_and_si256(bits, Set(0x7FFFFFFF));
  const __m256i nan = _mm256_or_si256(
      _mm256_and_si256(_mm256_srli_epi32(bits, 16), Set(0x8000)), Set(0x7FC0));
  return Select(_mm256_cmpgt_epi32(abs, Set(0x7F800000)), nan, rounded);
}

// Packs 8 lanes holding values below 2^16 into 8 uint16.
__m128i PackTo16(__m256i lanes) {
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes),
                          _mm256_extracti128_si256(lanes, 1));
}

struct Avx2Ops {
  static constexpr int kLanes = 8;
  using Vec = __m256;
  using Acc = __m256i;

  template <ElementType kType>
  static Vec Load(const uint8_t* src) {
    const auto* src128 = reinterpret_cast<const __m128i*>(src);
    if constexpr (kType == ElementType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
    } else if constexpr (kType == ElementType::kBF16) {
      const __m256i words = _mm256_cvtepu16_epi32(_mm_loadu_si128(src128));
      return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
    } else if constexpr (kType == ElementType::kF16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(src128));
    } else {
      return DecodeFp8<kType>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(src128)));
    }
  }

  template <ElementType kType>
  static void Store(uint8_t* dst, Vec values) {
    auto* dst128 = reinterpret_cast<__m128i*>(dst);
    if constexpr (kType == ElementType::kF32) {
      _mm256_storeu_ps(reinterpret_cast<float*>(dst), values);
    } else if constexpr (kType == ElementType::kBF16) {
      _mm_storeu_si128(dst128, PackTo16(RoundToBf16(values)));
    } else if constexpr (kType == ElementType::kF16) {
      _mm_storeu_si128(
          dst128, _mm256_cvtps_ph(
                      values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else {
      const __m128i words = PackTo16(EncodeFp8<kType>(values));
      _mm_storel_epi64(dst128, _mm_packus_epi16(words, words));
    }
  }

  static Vec Set1(float value) { return _mm256_set1_ps(value); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }

  // Finite magnitudes compare like their bit patterns as integers.
  static Acc AbsMaxInit() { return _mm256_setzero_si256(); }
  static Acc AbsMaxStep(Acc acc, Vec values) {
    const __m256i abs =
        _mm256_and_si256(_mm256_castps_si256(values), Set(0x7FFFFFFF));
    const __m256i finite = Less(abs, Set(0x7F800000));
    return _mm256_max_epu32(acc, _mm256_and_si256(abs, finite));
  }
  static float AbsMaxReduce(Acc acc) {
    alignas(32) uint32_t lanes[kLanes];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    uint32_t bits = 0;
    for (uint32_t lane : lanes) bits = lane > bits ? lane : bits;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
};

}  // namespace

const KernelTable* Avx2Kernels() {
  static const KernelTable table = MakeKernelTable<Avx2Ops>("avx2");
  return &table;
}

}  // namespace castserve::casting::internal
