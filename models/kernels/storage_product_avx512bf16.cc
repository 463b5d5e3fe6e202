// Narrow product kernels (storage_product_kernels.h, NarrowKernelTable):
// products in bf16 with `vdpbf16ps`, two products per f32 lane and
// instruction. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512bf16
// -mavx512vbmi; only called after a CPU check.
//
// Weights: bf16 storage is loaded as stored (32 per vector). fp8 codes
// (64 per chunk) become the bf16 of the same value, which is exact: two
// `vpermt2b` look up the high and low bytes of the bf16 of the code's 7-bit
// magnitude in 128-entry tables, the sign bit is or-ed into the high byte and
// `vpunpck{l,h}bw` interleave the bytes into two vectors of 16-bit lanes, in
// the order "per 128-bit lane, the low 8 codes, then the high 8" that
// SplitActivations gives the activations.
//
// Tiling: one row by 8 features, or up to 4 rows by 4 features; for more
// than 4 rows the loop over row groups is inside the loop over feature tiles,
// so that a tile's weight rows are read from memory once and from cache by
// the other row groups.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "models/kernels/storage_product_kernels.h"
#include "models/kernels/storage_product_simd.h"

namespace castserve::models::internal {
namespace {

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

float Bf16ToF32(uint16_t bits) { return FloatOf(uint32_t{bits} << 16); }

// The bf16 nearest to finite `f` (ties to even); truncated where rounding
// would overflow to infinity.
uint16_t NearestBf16(float f) {
  const uint32_t u = BitsOf(f);
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  if (((rounded >> 23) & 0xFFu) == 0xFFu) return static_cast<uint16_t>(u >> 16);
  return static_cast<uint16_t>(rounded >> 16);
}

// x as up to 3 bf16 parts, largest first; returns how many are needed to
// hold x exactly (1 for an infinity or NaN, whose part is x's own bits).
int SplitValue(float x, uint16_t parts[3]) {
  parts[1] = parts[2] = 0;
  if (!std::isfinite(x)) {
    parts[0] = static_cast<uint16_t>(BitsOf(x) >> 16) |
               (std::isnan(x) ? uint16_t{0x40} : uint16_t{0});
    return 1;
  }
  parts[0] = NearestBf16(x);
  const float rest = x - Bf16ToF32(parts[0]);  // Exact.
  if (rest == 0.0f) return 1;
  parts[1] = NearestBf16(rest);
  const float last = rest - Bf16ToF32(parts[1]);  // Exact.
  if (last == 0.0f) return 2;
  parts[2] = NearestBf16(last);
  return 3;
}

// Weights per vector chunk of the kernel's loop, and where column `i` of a
// chunk sits in the widened vectors.
template <ElementType kW>
constexpr int64_t ChunkOf() {
  return kW == ElementType::kBF16 ? 32 : 64;
}

inline int64_t ChunkPosition(ElementType type, int64_t i) {
  if (type == ElementType::kBF16) return i;
  // fp8: vector (i / 8) % 2 of the chunk, 128-bit lane i / 16, word i % 8.
  const int64_t lane = i / 16, high = (i / 8) % 2, word = i % 8;
  return high * 32 + lane * 8 + word;
}

int SplitActivations(const float* x, int64_t rows, const KernelWeight& w,
                     int max_parts, uint16_t* planes) {
  const int64_t k = w.in_features;
  int parts = 1;
  for (int64_t i = 0; i < rows * k && parts < max_parts; ++i) {
    uint16_t split[3];
    parts = std::max(parts, SplitValue(x[i], split));
  }
  parts = std::min(parts, max_parts);
  const int64_t chunk = w.element == ElementType::kBF16 ? 32 : 64;
  const int64_t block = ColumnBlock(w);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    uint16_t* out = planes + r * parts * k;
    for (int64_t c0 = 0; c0 < k; c0 += block) {
      const int64_t c1 = std::min(k, c0 + block);
      const int64_t full_end = c0 + (c1 - c0) / chunk * chunk;
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t at = c < full_end
                               ? c - (c - c0) % chunk +
                                     ChunkPosition(w.element, (c - c0) % chunk)
                               : c;
        uint16_t split[3];
        SplitValue(xr[c], split);
        for (int p = 0; p < parts; ++p) out[p * k + at] = split[p];
      }
    }
  }
  return parts;
}

// Widens chunks of weights to bf16 vectors: bf16 as stored, fp8 below.
template <ElementType kW, bool kFp8 = casting::IsFp8(kW)>
struct WeightLoader {
  static constexpr int kVectors = 1;
  explicit WeightLoader(ElementType) {}
  void Load(const uint8_t* src, __m512bh* out) const {
    out[0] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(src));
  }
};

// The bf16 bytes of each 7-bit fp8 magnitude, as two 64-byte tables each.
struct Fp8Tables {
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t low[128];
};

const Fp8Tables& TablesFor(ElementType type) {
  static const Fp8Tables* const tables = [] {
    static Fp8Tables t[2];
    const ElementType types[2] = {ElementType::kF8E4M3FN, ElementType::kF8E5M2};
    for (int i = 0; i < 2; ++i) {
      for (uint32_t m = 0; m < 128; ++m) {
        const uint16_t bits = Fp8MagnitudeBf16(types[i], m);
        t[i].high[m] = static_cast<uint8_t>(bits >> 8);
        t[i].low[m] = static_cast<uint8_t>(bits & 0xFF);
      }
    }
    return t;
  }();
  return tables[type == ElementType::kF8E4M3FN ? 0 : 1];
}

template <ElementType kW>
struct WeightLoader<kW, true> {
  static constexpr int kVectors = 2;
  __m512i high0, high1, low0, low1, sign;

  explicit WeightLoader(ElementType type) {
    const Fp8Tables& t = TablesFor(type);
    high0 = _mm512_load_si512(t.high);
    high1 = _mm512_load_si512(t.high + 64);
    low0 = _mm512_load_si512(t.low);
    low1 = _mm512_load_si512(t.low + 64);
    sign = _mm512_set1_epi8(static_cast<char>(0x80));
  }

  void Load(const uint8_t* src, __m512bh* out) const {
    const __m512i codes = _mm512_loadu_si512(src);
    // Index bit 6 picks the table half; bit 7 (the sign) is ignored.
    __m512i high = _mm512_permutex2var_epi8(high0, codes, high1);
    const __m512i low = _mm512_permutex2var_epi8(low0, codes, low1);
    high = _mm512_ternarylogic_epi32(high, codes, sign, 0xF8);  // h | c & s
    out[0] = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(low, high));
    out[1] = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(low, high));
  }
};

// kRows rows of planes times kFeatures features whose rows start at
// `rows[f]`; writes y[r * w.out_features + f0 + f] for f < num_features.
template <ElementType kW, int kRows, int kFeatures, int kParts>
void Tile(const uint16_t* planes, const KernelWeight& w,
          const WeightLoader<kW>& loader, const uint8_t* const* rows,
          int64_t f0, int num_features, float* y) {
  constexpr int64_t kBytes = casting::ElementSizeBytes(kW);
  constexpr int64_t kChunk = ChunkOf<kW>();
  constexpr int kVectors = WeightLoader<kW>::kVectors;
  const int64_t k = w.in_features;
  const int64_t block = ColumnBlock(w);
  // The same place in the next tile's rows, into L2 (see
  // storage_product_simd.h).
  const int64_t next_tile = kFeatures * k * kBytes;
  float out[kRows][kFeatures] = {};
  for (int64_t c0 = 0, b = 0; c0 < k; c0 += block, ++b) {
    const int64_t c1 = std::min(k, c0 + block);
    __m512 acc[kRows][kFeatures];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
      for (int f = 0; f < kFeatures; ++f) acc[r][f] = _mm512_setzero_ps();
    }
    int64_t c = c0;
    for (; c + kChunk <= c1; c += kChunk) {
      __m512bh weights[kFeatures][kVectors];
#pragma GCC unroll 8
      for (int f = 0; f < kFeatures; ++f) {
        loader.Load(rows[f] + c * kBytes, weights[f]);
        __builtin_prefetch(rows[f] + c * kBytes + next_tile, 0, 2);
      }
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 3
          for (int p = 0; p < kParts; ++p) {
            const __m512bh xv = reinterpret_cast<__m512bh>(
                _mm512_loadu_si512(planes + (r * kParts + p) * k + c + v * 32));
#pragma GCC unroll 8
            for (int f = 0; f < kFeatures; ++f) {
              acc[r][f] = _mm512_dpbf16_ps(acc[r][f], xv, weights[f][v]);
            }
          }
        }
      }
    }
    float sums[kRows][kFeatures];
    for (int r = 0; r < kRows; ++r) {
      for (int f = 0; f < kFeatures; ++f) {
        sums[r][f] = _mm512_reduce_add_ps(acc[r][f]);
      }
    }
    for (; c < c1; ++c) {
      for (int f = 0; f < kFeatures; ++f) {
        const float weight = ScalarWeight<kW>(rows[f] + c * kBytes);
        for (int r = 0; r < kRows; ++r) {
          for (int p = 0; p < kParts; ++p) {
            sums[r][f] += Bf16ToF32(planes[(r * kParts + p) * k + c]) * weight;
          }
        }
      }
    }
    for (int f = 0; f < kFeatures; ++f) {
      const float scale = ScaleOf(w, f0 + f, b);
      for (int r = 0; r < kRows; ++r) out[r][f] += scale * sums[r][f];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int f = 0; f < num_features; ++f) {
      y[r * w.out_features + f0 + f] = out[r][f];
    }
  }
}

// The first rows of each feature of [f0, f0 + num_features); a last
// partial tile repeats its last feature's row (read, not written).
template <ElementType kW, int kFeatures>
void TileRows(const KernelWeight& w, int64_t f0, int num_features,
              const uint8_t** rows) {
  const int64_t row_bytes = w.in_features * casting::ElementSizeBytes(kW);
  for (int f = 0; f < kFeatures; ++f) {
    rows[f] = w.data + (f0 + std::min(f, num_features - 1)) * row_bytes;
  }
}

template <ElementType kW, int kParts>
void ProductOfParts(const uint16_t* planes, int64_t rows, const KernelWeight& w,
                    int64_t f_begin, int64_t f_end, float* y) {
  const WeightLoader<kW> loader(kW);
  if (rows == 1) {
    constexpr int kFeatures = 8;
    for (int64_t f0 = f_begin; f0 < f_end; f0 += kFeatures) {
      const int n = static_cast<int>(std::min<int64_t>(kFeatures, f_end - f0));
      const uint8_t* tile_rows[kFeatures];
      TileRows<kW, kFeatures>(w, f0, n, tile_rows);
      Tile<kW, 1, kFeatures, kParts>(planes, w, loader, tile_rows, f0, n, y);
    }
    return;
  }
  constexpr int kFeatures = 4;
  const int64_t row_stride = kParts * w.in_features;
  for (int64_t f0 = f_begin; f0 < f_end; f0 += kFeatures) {
    const int n = static_cast<int>(std::min<int64_t>(kFeatures, f_end - f0));
    const uint8_t* tile_rows[kFeatures];
    TileRows<kW, kFeatures>(w, f0, n, tile_rows);
    for (int64_t r = 0; r < rows; r += 4) {
      const uint16_t* p = planes + r * row_stride;
      float* yr = y + r * w.out_features;
      switch (std::min<int64_t>(4, rows - r)) {
        case 4:
          Tile<kW, 4, kFeatures, kParts>(p, w, loader, tile_rows, f0, n, yr);
          break;
        case 3:
          Tile<kW, 3, kFeatures, kParts>(p, w, loader, tile_rows, f0, n, yr);
          break;
        case 2:
          Tile<kW, 2, kFeatures, kParts>(p, w, loader, tile_rows, f0, n, yr);
          break;
        default:
          Tile<kW, 1, kFeatures, kParts>(p, w, loader, tile_rows, f0, n, yr);
          break;
      }
    }
  }
}

template <ElementType kW>
void Product(const uint16_t* planes, int parts, int64_t rows,
             const KernelWeight& w, int64_t f_begin, int64_t f_end, float* y) {
  switch (parts) {
    case 1:
      return ProductOfParts<kW, 1>(planes, rows, w, f_begin, f_end, y);
    case 2:
      return ProductOfParts<kW, 2>(planes, rows, w, f_begin, f_end, y);
    default:
      return ProductOfParts<kW, 3>(planes, rows, w, f_begin, f_end, y);
  }
}

// Where column i of a chunk lands among the f32 vectors the widened
// kernels make of it: each bf16 vector (ChunkPosition's order) becomes two,
// the low then the high 4 words of each 128-bit lane (vpunpck{l,h}wd).
inline int64_t F32ChunkPosition(ElementType type, int64_t i) {
  const int64_t at = ChunkPosition(type, i);
  const int64_t base = at / 32 * 32, q = at % 32;
  const int64_t lane = q / 8, word = q % 8;
  return base + (word / 4) * 16 + lane * 4 + word % 4;
}

void PermuteActivations(const float* x, int64_t rows, const KernelWeight& w,
                        float* out) {
  const int64_t k = w.in_features;
  const int64_t chunk = w.element == ElementType::kBF16 ? 32 : 64;
  const int64_t block = ColumnBlock(w);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < k; c0 += block) {
      const int64_t c1 = std::min(k, c0 + block);
      const int64_t full_end = c0 + (c1 - c0) / chunk * chunk;
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t at =
            c < full_end ? c - (c - c0) % chunk +
                               F32ChunkPosition(w.element, (c - c0) % chunk)
                         : c;
        out[r * k + at] = x[r * k + c];
      }
    }
  }
}

// As Tile, in f32: each chunk widened to bf16 (WeightLoader), then to f32
// (a bf16 is the high half of its f32), one FMA per 16 weights and row; x
// in PermuteActivations' order.
template <ElementType kW, int kRows, int kFeatures>
void WideTile(const float* x, const KernelWeight& w,
              const WeightLoader<kW>& loader, const uint8_t* const* rows,
              int64_t f0, int num_features, float* y) {
  constexpr int64_t kBytes = casting::ElementSizeBytes(kW);
  constexpr int64_t kChunk = ChunkOf<kW>();
  constexpr int kVectors = WeightLoader<kW>::kVectors;
  const int64_t k = w.in_features;
  const int64_t block = ColumnBlock(w);
  const int64_t next_tile = kFeatures * k * kBytes;
  const __m512i zero = _mm512_setzero_si512();
  float out[kRows][kFeatures] = {};
  for (int64_t c0 = 0, b = 0; c0 < k; c0 += block, ++b) {
    const int64_t c1 = std::min(k, c0 + block);
    __m512 acc[kRows][kFeatures];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
      for (int f = 0; f < kFeatures; ++f) acc[r][f] = _mm512_setzero_ps();
    }
    int64_t c = c0;
    for (; c + kChunk <= c1; c += kChunk) {
      if constexpr (kRows == 1) {
        // One feature at a time: 8 features' chunks would not fit the
        // registers, and each widened vector has one use anyway.
#pragma GCC unroll 8
        for (int f = 0; f < kFeatures; ++f) {
          __m512bh halves[kVectors];
          loader.Load(rows[f] + c * kBytes, halves);
          __builtin_prefetch(rows[f] + c * kBytes + next_tile, 0, 2);
#pragma GCC unroll 2
          for (int v = 0; v < kVectors; ++v) {
            const __m512i words = reinterpret_cast<__m512i>(halves[v]);
            acc[0][f] = _mm512_fmadd_ps(
                _mm512_loadu_ps(x + c + v * 32),
                _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, words)),
                acc[0][f]);
            acc[0][f] = _mm512_fmadd_ps(
                _mm512_loadu_ps(x + c + v * 32 + 16),
                _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, words)),
                acc[0][f]);
          }
        }
      } else {
        // Every feature's chunk first, so that each activation vector is
        // loaded once per row and used for every feature.
        __m512bh halves[kFeatures][kVectors];
#pragma GCC unroll 8
        for (int f = 0; f < kFeatures; ++f) {
          loader.Load(rows[f] + c * kBytes, halves[f]);
          __builtin_prefetch(rows[f] + c * kBytes + next_tile, 0, 2);
        }
#pragma GCC unroll 2
        for (int v = 0; v < kVectors; ++v) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            __m512 wide[kFeatures];
#pragma GCC unroll 8
            for (int f = 0; f < kFeatures; ++f) {
              const __m512i words = reinterpret_cast<__m512i>(halves[f][v]);
              wide[f] = _mm512_castsi512_ps(
                  h == 0 ? _mm512_unpacklo_epi16(zero, words)
                         : _mm512_unpackhi_epi16(zero, words));
            }
#pragma GCC unroll 4
            for (int r = 0; r < kRows; ++r) {
              const __m512 xv =
                  _mm512_loadu_ps(x + r * k + c + v * 32 + h * 16);
#pragma GCC unroll 8
              for (int f = 0; f < kFeatures; ++f) {
                acc[r][f] = _mm512_fmadd_ps(xv, wide[f], acc[r][f]);
              }
            }
          }
        }
      }
    }
    float sums[kRows][kFeatures];
    for (int r = 0; r < kRows; ++r) {
      for (int f = 0; f < kFeatures; ++f) {
        sums[r][f] = _mm512_reduce_add_ps(acc[r][f]);
      }
    }
    for (; c < c1; ++c) {
      for (int f = 0; f < kFeatures; ++f) {
        const float weight = ScalarWeight<kW>(rows[f] + c * kBytes);
        for (int r = 0; r < kRows; ++r) sums[r][f] += x[r * k + c] * weight;
      }
    }
    for (int f = 0; f < kFeatures; ++f) {
      const float scale = ScaleOf(w, f0 + f, b);
      for (int r = 0; r < kRows; ++r) out[r][f] += scale * sums[r][f];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int f = 0; f < num_features; ++f) {
      y[r * w.out_features + f0 + f] = out[r][f];
    }
  }
}

template <ElementType kW>
void WideProduct(const float* x, int64_t rows, const KernelWeight& w,
                 int64_t f_begin, int64_t f_end, float* y) {
  const WeightLoader<kW> loader(kW);
  if (rows == 1) {
    constexpr int kFeatures = 8;
    for (int64_t f0 = f_begin; f0 < f_end; f0 += kFeatures) {
      const int n = static_cast<int>(std::min<int64_t>(kFeatures, f_end - f0));
      const uint8_t* tile_rows[kFeatures];
      TileRows<kW, kFeatures>(w, f0, n, tile_rows);
      WideTile<kW, 1, kFeatures>(x, w, loader, tile_rows, f0, n, y);
    }
    return;
  }
  constexpr int kFeatures = 4;
  for (int64_t f0 = f_begin; f0 < f_end; f0 += kFeatures) {
    const int n = static_cast<int>(std::min<int64_t>(kFeatures, f_end - f0));
    const uint8_t* tile_rows[kFeatures];
    TileRows<kW, kFeatures>(w, f0, n, tile_rows);
    for (int64_t r = 0; r < rows; r += 4) {
      const float* xr = x + r * w.in_features;
      float* yr = y + r * w.out_features;
      switch (std::min<int64_t>(4, rows - r)) {
        case 4:
          WideTile<kW, 4, kFeatures>(xr, w, loader, tile_rows, f0, n, yr);
          break;
        case 3:
          WideTile<kW, 3, kFeatures>(xr, w, loader, tile_rows, f0, n, yr);
          break;
        case 2:
          WideTile<kW, 2, kFeatures>(xr, w, loader, tile_rows, f0, n, yr);
          break;
        default:
          WideTile<kW, 1, kFeatures>(xr, w, loader, tile_rows, f0, n, yr);
          break;
      }
    }
  }
}

}  // namespace

const NarrowKernelTable* Avx512Bf16ProductKernels() {
  static const NarrowKernelTable table = [] {
    NarrowKernelTable t = {};
    t.name = "avx512_bf16";
    t.split = &SplitActivations;
    t.product[static_cast<int>(ElementType::kBF16)] =
        &Product<ElementType::kBF16>;
    t.product[static_cast<int>(ElementType::kF8E4M3FN)] =
        &Product<ElementType::kF8E4M3FN>;
    t.product[static_cast<int>(ElementType::kF8E5M2)] =
        &Product<ElementType::kF8E5M2>;
    t.permute = &PermuteActivations;
    // Only where it measured faster than the avx512 kernels'
    // (matmul_benchmark): their E4M3FN widening costs about 9 instructions
    // per 16 codes, their BF16 and E5M2 ones 2-3, as cheap as going through
    // bf16.
    t.widened[static_cast<int>(ElementType::kF8E4M3FN)] =
        &WideProduct<ElementType::kF8E4M3FN>;
    return t;
  }();
  return &table;
}

}  // namespace castserve::models::internal
