// Loads of stored elements as f32, shared by the codec's kernels
// (casting/codec/codec_*.cc) and the product kernels that read storage
// (models/kernels/storage_product_*.cc), so each conversion is written once:
//
//   LoadBits<T>(src)    one element's bit pattern (scalar, any type)
//   LoadWide8<T>(src)   8 F32/BF16/F16 elements as __m256 (AVX2 + F16C)
//   LoadWide16<T>(src)  16 of them as __m512 (AVX-512F)
//
// fp8 is not here: the codec decodes it in 32-bit lanes, the product
// kernels through f16 patterns (each file says why). The vector loads exist
// only in translation units compiled with the matching -m flags, and
// everything has internal linkage, so no ISA-specific code is shared
// through the linker.
#ifndef CASTSERVE_CASTING_CODEC_ELEMENT_LOADS_H_
#define CASTSERVE_CASTING_CODEC_ELEMENT_LOADS_H_

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

#include "casting/codec/storage_format.h"

namespace castserve::casting::internal {
namespace {

template <ElementType kType>
uint32_t LoadBits(const uint8_t* src) {
  if constexpr (ElementSizeBytes(kType) == 4) {
    uint32_t bits;
    std::memcpy(&bits, src, 4);
    return bits;
  } else if constexpr (ElementSizeBytes(kType) == 2) {
    uint16_t bits;
    std::memcpy(&bits, src, 2);
    return bits;
  } else {
    return *src;
  }
}

#if defined(__AVX2__) && defined(__F16C__)
template <ElementType kType>
__m256 LoadWide8(const uint8_t* src) {
  static_assert(kType == ElementType::kF32 || kType == ElementType::kBF16 ||
                kType == ElementType::kF16);
  const auto* src128 = reinterpret_cast<const __m128i*>(src);
  if constexpr (kType == ElementType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
  } else if constexpr (kType == ElementType::kBF16) {
    const __m256i words = _mm256_cvtepu16_epi32(_mm_loadu_si128(src128));
    return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(src128));
  }
}
#endif

#if defined(__AVX512F__)
template <ElementType kType>
__m512 LoadWide16(const uint8_t* src) {
  static_assert(kType == ElementType::kF32 || kType == ElementType::kBF16 ||
                kType == ElementType::kF16);
  const auto* src256 = reinterpret_cast<const __m256i*>(src);
  if constexpr (kType == ElementType::kF32) {
    return _mm512_loadu_ps(src);
  } else if constexpr (kType == ElementType::kBF16) {
    const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(src256));
    return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(src256));
  }
}
#endif

}  // namespace
}  // namespace castserve::casting::internal

#endif  // CASTSERVE_CASTING_CODEC_ELEMENT_LOADS_H_
