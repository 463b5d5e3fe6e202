// The scalar reference conversions (written from the format definitions, not
// with bit tricks, so that the fast kernels are checked against something
// independent) and the two scalar kernel tables built on them.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec.h"
#include "casting/codec/codec_internal.h"
#include "casting/codec/codec_simd.h"

namespace castserve::casting {
namespace {

// A binary float format narrower than f32, described by its fields.
struct SmallFloatSpec {
  int total_bits;
  int mantissa_bits;
  int exponent_bias;
  uint32_t max_finite_magnitude;  // Bits of the largest finite value.
  bool saturates;                 // Overflow -> max instead of inf.
  bool has_inf;                   // Else all-ones exponent holds finite values.
};

constexpr SmallFloatSpec kE4M3FNSpec = {8, 3, 7, 0x7E, true, false};
constexpr SmallFloatSpec kE5M2Spec = {8, 2, 15, 0x7B, true, true};
constexpr SmallFloatSpec kF16Spec = {16, 10, 15, 0x7BFF, false, true};
constexpr SmallFloatSpec kBF16Spec = {16, 7, 127, 0x7F7F, false, true};

const SmallFloatSpec& SpecFor(ElementType type) {
  switch (type) {
    case ElementType::kF16:
      return kF16Spec;
    case ElementType::kBF16:
      return kBF16Spec;
    case ElementType::kF8E4M3FN:
      return kE4M3FNSpec;
    default:
      return kE5M2Spec;
  }
}

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t InfMagnitude(const SmallFloatSpec& spec) {
  return ((uint32_t{1} << (spec.total_bits - 1 - spec.mantissa_bits)) - 1)
         << spec.mantissa_bits;
}

// The NaN each type encodes a NaN to; `f32_bits` is the NaN being encoded.
uint32_t NanMagnitude(ElementType type, uint32_t f32_bits) {
  switch (type) {
    case ElementType::kF8E4M3FN:
      return 0x7F;
    case ElementType::kF8E5M2:
      return 0x7E;
    case ElementType::kBF16:
      return 0x7FC0;
    default:  // F16: quieted, top payload bits kept (as F16C does).
      return 0x7E00 | ((f32_bits & 0x7FFFFF) >> 13);
  }
}

// Rounds a finite magnitude to the format (round-to-nearest-even through
// exact double arithmetic). Returns the magnitude bits, or a value above
// spec.max_finite_magnitude when the rounded value is out of range.
uint32_t RoundMagnitude(double magnitude, const SmallFloatSpec& spec) {
  if (magnitude == 0) return 0;
  const int m = spec.mantissa_bits;
  const int min_exponent = 1 - spec.exponent_bias;
  int frexp_exponent;
  std::frexp(magnitude, &frexp_exponent);
  int exponent = std::max(frexp_exponent - 1, min_exponent);
  double significand = std::nearbyint(std::ldexp(magnitude, m - exponent));
  if (significand >= std::ldexp(1.0, m + 1)) {  // Rounded up a binade.
    ++exponent;
    significand /= 2;
  }
  const auto integer = static_cast<uint64_t>(significand);
  if (integer < (uint64_t{1} << m)) return static_cast<uint32_t>(integer);
  const uint64_t biased = static_cast<uint64_t>(exponent + spec.exponent_bias);
  const uint64_t bits = (biased << m) | (integer - (uint64_t{1} << m));
  return bits > 0xFFFFFFFFu ? 0xFFFFFFFFu : static_cast<uint32_t>(bits);
}

uint32_t EncodeSmallFloat(ElementType type, float value) {
  const SmallFloatSpec& spec = SpecFor(type);
  const uint32_t f32_bits = FloatBits(value);
  const uint32_t sign = (f32_bits >> 31) << (spec.total_bits - 1);
  if (std::isnan(value)) return sign | NanMagnitude(type, f32_bits);
  uint32_t magnitude;
  if (std::isinf(value)) {
    magnitude = spec.has_inf ? InfMagnitude(spec) : spec.max_finite_magnitude;
  } else {
    magnitude = RoundMagnitude(std::fabs(static_cast<double>(value)), spec);
    if (magnitude > spec.max_finite_magnitude) {
      magnitude =
          spec.saturates ? spec.max_finite_magnitude : InfMagnitude(spec);
    }
  }
  return sign | magnitude;
}

float DecodeSmallFloatNan(ElementType type, uint32_t bits) {
  const SmallFloatSpec& spec = SpecFor(type);
  const uint32_t sign = ((bits >> (spec.total_bits - 1)) & 1) << 31;
  const uint32_t mantissa = bits & ((1u << spec.mantissa_bits) - 1);
  switch (type) {
    case ElementType::kBF16:
      return BitsFloat(bits << 16);
    case ElementType::kF16:
      return BitsFloat(sign | 0x7FC00000 | (mantissa << 13));
    default:
      return BitsFloat(sign | 0x7FC00000);
  }
}

float DecodeSmallFloat(ElementType type, uint32_t bits) {
  const SmallFloatSpec& spec = SpecFor(type);
  const int m = spec.mantissa_bits;
  const bool negative = (bits >> (spec.total_bits - 1)) & 1;
  const uint32_t magnitude = bits & ((1u << (spec.total_bits - 1)) - 1);
  const uint32_t exponent = magnitude >> m;
  const uint32_t mantissa = magnitude & ((1u << m) - 1);
  const uint32_t inf = InfMagnitude(spec);
  if (spec.has_inf && magnitude >= inf) {
    if (magnitude > inf) return DecodeSmallFloatNan(type, bits);
    return negative ? -INFINITY : INFINITY;
  }
  if (!spec.has_inf && magnitude > spec.max_finite_magnitude) {
    return DecodeSmallFloatNan(type, bits);
  }
  double value;
  if (exponent == 0) {
    value =
        std::ldexp(static_cast<double>(mantissa), 1 - spec.exponent_bias - m);
  } else {
    value = std::ldexp(static_cast<double>((1u << m) | mantissa),
                       static_cast<int>(exponent) - spec.exponent_bias - m);
  }
  return static_cast<float>(negative ? -value : value);
}

}  // namespace

float ElementBitsToF32(ElementType type, uint32_t bits) {
  if (type == ElementType::kF32) return BitsFloat(bits);
  return DecodeSmallFloat(type, bits);
}

uint32_t F32ToElementBits(ElementType type, float value) {
  if (type == ElementType::kF32) return FloatBits(value);
  return EncodeSmallFloat(type, value);
}

namespace internal {
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

template <ElementType kType>
void StoreBits(uint8_t* dst, uint32_t bits) {
  if constexpr (ElementSizeBytes(kType) == 4) {
    std::memcpy(dst, &bits, 4);
  } else if constexpr (ElementSizeBytes(kType) == 2) {
    const auto narrow = static_cast<uint16_t>(bits);
    std::memcpy(dst, &narrow, 2);
  } else {
    *dst = static_cast<uint8_t>(bits);
  }
}

// One lane of f32: the reference, element by element.
struct ReferenceOps {
  static constexpr int kLanes = 1;
  using Vec = float;
  using Acc = float;

  template <ElementType kType>
  static Vec Load(const uint8_t* src) {
    return ElementBitsToF32(kType, LoadBits<kType>(src));
  }
  template <ElementType kType>
  static void Store(uint8_t* dst, Vec value) {
    StoreBits<kType>(dst, F32ToElementBits(kType, value));
  }
  static Vec Set1(float value) { return value; }
  static Vec Mul(Vec a, Vec b) { return a * b; }
  static Vec Div(Vec a, Vec b) { return a / b; }
  static Acc AbsMaxInit() { return 0.0f; }
  static Acc AbsMaxStep(Acc acc, Vec value) {
    return std::isfinite(value) ? std::max(acc, std::fabs(value)) : acc;
  }
  static float AbsMaxReduce(Acc acc) { return acc; }
};

std::array<float, 256> MakeFp8Table(ElementType type) {
  std::array<float, 256> table;
  for (uint32_t code = 0; code < 256; ++code) {
    table[code] = ElementBitsToF32(type, code);
  }
  return table;
}

const std::array<float, 256> kE4M3FNTable =
    MakeFp8Table(ElementType::kF8E4M3FN);
const std::array<float, 256> kE5M2Table = MakeFp8Table(ElementType::kF8E5M2);

// Scalar with 256-entry tables for fp8 decode and bit arithmetic for BF16:
// the fallback for CPUs without AVX2.
struct PortableOps : ReferenceOps {
  template <ElementType kType>
  static Vec Load(const uint8_t* src) {
    if constexpr (kType == ElementType::kF8E4M3FN) return kE4M3FNTable[*src];
    if constexpr (kType == ElementType::kF8E5M2) return kE5M2Table[*src];
    if constexpr (kType == ElementType::kBF16) {
      return BitsFloat(LoadBits<kType>(src) << 16);
    }
    return ReferenceOps::Load<kType>(src);
  }
  template <ElementType kType>
  static void Store(uint8_t* dst, Vec value) {
    if constexpr (kType == ElementType::kBF16) {
      StoreBits<kType>(dst, RoundToBf16(value));
    } else {
      ReferenceOps::Store<kType>(dst, value);
    }
  }
  static uint32_t RoundToBf16(float value) {
    const uint32_t bits = FloatBits(value);
    if (std::isnan(value)) return ((bits >> 16) & 0x8000) | 0x7FC0;
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  }
};

}  // namespace

const KernelTable& ReferenceKernels() {
  static const KernelTable table = MakeKernelTable<ReferenceOps>("reference");
  return table;
}

const KernelTable& PortableKernels() {
  static const KernelTable table = MakeKernelTable<PortableOps>("portable");
  return table;
}

}  // namespace internal
}  // namespace castserve::casting
