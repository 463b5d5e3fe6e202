// Internal to the codec: the conversion loop shared by every kernel family,
// written once over an "ops" type V that supplies lanes of f32:
//
//   static constexpr int kLanes;
//   using Vec;                                  // kLanes f32 values
//   template <ElementType T> static Vec Load(const uint8_t* src);
//   template <ElementType T> static void Store(uint8_t* dst, Vec v);
//   static Vec Set1(float), Mul(Vec, Vec), Div(Vec, Vec);
//   using Acc; static Acc AbsMaxInit(); static Acc AbsMaxStep(Acc, Vec);
//   static float AbsMaxReduce(Acc);             // finite lanes only
//
// Included only by the per-ISA .cc files, each compiled with its own -m
// flags; everything here has internal linkage so that no ISA-specific code
// is shared between translation units through the linker.
#ifndef CASTSERVE_CASTING_CODEC_CODEC_SIMD_H_
#define CASTSERVE_CASTING_CODEC_CODEC_SIMD_H_

#include <cstdint>
#include <cstring>
#include <utility>

#include "casting/codec/codec_internal.h"
#include "casting/codec/storage_format.h"

namespace castserve::casting::internal {
namespace {

enum class ScaleOp { kNone, kMultiply, kDivide };

// Field layout of an fp8 type, as f32 bit patterns where the vector code
// needs them.
struct Fp8Layout {
  int mantissa_bits;
  int exponent_bias;
  uint32_t max_magnitude;  // Code of the largest finite value.
  uint32_t nan_magnitude;  // Code every NaN encodes to.
  bool has_inf;
  uint32_t inf_magnitude;

  // Added to (code magnitude << (23 - m)) to rebias a normal to f32.
  constexpr uint32_t RebiasBits() const {
    return uint32_t(127 - exponent_bias) << 23;
  }
  // Value of one subnormal step, 2^(1 - bias - m), as f32 bits.
  constexpr uint32_t SubnormalStepBits() const {
    return uint32_t(127 + 1 - exponent_bias - mantissa_bits) << 23;
  }
  // Adding 2^(24 - bias - m) to a magnitude below the smallest normal rounds
  // it (in hardware, to nearest even) to a whole number of subnormal steps.
  constexpr uint32_t SubnormalMagicBits() const {
    return uint32_t(127 + 24 - exponent_bias - mantissa_bits) << 23;
  }
  constexpr uint32_t MinNormalBits() const {
    return uint32_t(127 + 1 - exponent_bias) << 23;
  }
  constexpr uint32_t MaxFiniteBits() const {
    const uint32_t exponent = max_magnitude >> mantissa_bits;
    const uint32_t mantissa = max_magnitude & ((1u << mantissa_bits) - 1);
    return ((exponent + 127 - exponent_bias) << 23) |
           (mantissa << (23 - mantissa_bits));
  }
};

template <ElementType kType>
constexpr Fp8Layout Fp8LayoutOf() {
  static_assert(IsFp8(kType));
  if constexpr (kType == ElementType::kF8E4M3FN) {
    return {3, 7, 0x7E, 0x7F, false, 0};
  } else {
    return {2, 15, 0x7B, 0x7E, true, 0x7C};
  }
}

static_assert(Fp8LayoutOf<ElementType::kF8E4M3FN>().MaxFiniteBits() ==
              0x43E00000);  // 448
static_assert(Fp8LayoutOf<ElementType::kF8E5M2>().MaxFiniteBits() ==
              0x47600000);  // 57344

template <class V, ScaleOp kOp>
typename V::Vec ApplyScale(typename V::Vec x, typename V::Vec scale) {
  if constexpr (kOp == ScaleOp::kMultiply) return V::Mul(x, scale);
  if constexpr (kOp == ScaleOp::kDivide) return V::Div(x, scale);
  return x;
}

// Elements left after the full blocks, in [0, kLanes).
template <class V>
size_t TailLength(int64_t rest) {
  return rest <= 0 ? 0 : static_cast<size_t>(rest % V::kLanes);
}

// One block of kLanes elements: load as f32, scale, round to the destination.
template <class V, ElementType kSrc, ElementType kDst, ScaleOp kOp>
void ConvertBlock(const uint8_t* src, typename V::Vec scale, uint8_t* dst) {
  V::template Store<kDst>(
      dst, ApplyScale<V, kOp>(V::template Load<kSrc>(src), scale));
}

template <class V, ElementType kSrc, ElementType kDst, ScaleOp kOp>
void Convert(const void* src_void, int64_t n, float scale, void* dst_void) {
  constexpr int64_t kSrcBytes = ElementSizeBytes(kSrc);
  constexpr int64_t kDstBytes = ElementSizeBytes(kDst);
  const auto* src = static_cast<const uint8_t*>(src_void);
  auto* dst = static_cast<uint8_t*>(dst_void);
  const typename V::Vec vscale = V::Set1(scale);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    ConvertBlock<V, kSrc, kDst, kOp>(src + i * kSrcBytes, vscale,
                                     dst + i * kDstBytes);
  }
  if constexpr (V::kLanes > 1) {
    const size_t tail = TailLength<V>(n - i);
    if (tail == 0) return;
    // The tail goes through zero-padded buffers so it uses the same code.
    alignas(64) uint8_t src_tail[V::kLanes * kSrcBytes] = {};
    alignas(64) uint8_t dst_tail[V::kLanes * kDstBytes];
    std::memcpy(src_tail, src + i * kSrcBytes, tail * kSrcBytes);
    ConvertBlock<V, kSrc, kDst, kOp>(src_tail, vscale, dst_tail);
    std::memcpy(dst + i * kDstBytes, dst_tail, tail * kDstBytes);
  }
}

template <ElementType kType>
void Copy(const void* src, int64_t n, float /*scale*/, void* dst) {
  std::memcpy(dst, src, n * ElementSizeBytes(kType));
}

template <class V, ElementType kSrc>
float AbsMax(const void* src_void, int64_t n) {
  constexpr int64_t kSrcBytes = ElementSizeBytes(kSrc);
  const auto* src = static_cast<const uint8_t*>(src_void);
  typename V::Acc acc = V::AbsMaxInit();
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    acc = V::AbsMaxStep(acc, V::template Load<kSrc>(src + i * kSrcBytes));
  }
  if constexpr (V::kLanes > 1) {
    const size_t tail = TailLength<V>(n - i);
    if (tail > 0) {
      alignas(64) uint8_t padded[V::kLanes * kSrcBytes] = {};
      std::memcpy(padded, src + i * kSrcBytes, tail * kSrcBytes);
      acc = V::AbsMaxStep(acc, V::template Load<kSrc>(padded));
    }
  }
  return V::AbsMaxReduce(acc);
}

template <class V, int kSrc, int kDst>
void FillPair(KernelTable& table) {
  constexpr auto src = static_cast<ElementType>(kSrc);
  constexpr auto dst = static_cast<ElementType>(kDst);
  if constexpr (kSrc == kDst) {
    table.plain[kSrc][kDst] = &Copy<src>;
  } else {
    table.plain[kSrc][kDst] = &Convert<V, src, dst, ScaleOp::kNone>;
  }
  table.multiply[kSrc][kDst] = &Convert<V, src, dst, ScaleOp::kMultiply>;
  table.divide[kSrc][kDst] = &Convert<V, src, dst, ScaleOp::kDivide>;
}

template <class V, int kSrc, int... kDst>
void FillRow(KernelTable& table, std::integer_sequence<int, kDst...>) {
  (FillPair<V, kSrc, kDst>(table), ...);
  table.absmax[kSrc] = &AbsMax<V, static_cast<ElementType>(kSrc)>;
}

template <class V, int... kSrc>
KernelTable MakeKernelTable(const char* name,
                            std::integer_sequence<int, kSrc...>) {
  KernelTable table = {};
  table.name = name;
  (FillRow<V, kSrc>(table, std::make_integer_sequence<int, kNumElementTypes>()),
   ...);
  return table;
}

template <class V>
KernelTable MakeKernelTable(const char* name) {
  return MakeKernelTable<V>(
      name, std::make_integer_sequence<int, kNumElementTypes>());
}

}  // namespace
}  // namespace castserve::casting::internal

#endif  // CASTSERVE_CASTING_CODEC_CODEC_SIMD_H_
