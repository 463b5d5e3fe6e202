// AMX product kernels (storage_product_kernels.h, AmxKernelTable): the
// narrow kernels' bf16 products (each product of a bf16 weight and a bf16
// part of an activation exact in f32, sums in f32) on AMX tiles, 16 x 16 x 32
// multiply-adds per `tdpbf16ps`. Compiled with -mamx-tile -mamx-bf16 and the
// avx512_bf16 kernels' flags; only called after a CPU check and the Linux
// permission request (AmxUsable).
//
// Layout: the product is computed transposed, C = W x^T, so that the weight
// is the A operand and is read as stored: an A tile is 16 weight rows
// (features) by 32 bf16 columns, loaded straight from bf16 storage with the
// row stride of the weight; fp8 codes (and partial tiles) are first
// widened to the bf16 of the same value (exact) into a buffer, kStrip
// column steps ahead of their tile loads, each row's strip in one go. The
// rows' next strip is prefetched (64 rows at a time are more streams than
// the hardware prefetcher follows). The activations are the B
// operand: Pack writes each part of each group of 16 rows as tiles of 16
// column pairs by 16 rows (the pair of columns 2i, 2i + 1 of row r at
// [i][r]), zero-padded to whole tiles, once per product. C tiles hold 16
// features by 16 rows in f32.
//
// Tiles: C in tmm0-3 (2 feature tiles x 2 row groups, or 4 feature tiles
// x 1), A in tmm4-5, B in tmm6-7; every tile is configured 16 rows of 64
// bytes, partial ones padded with zeros (the padding's products are
// discarded).
//
// AMX flushes bf16 subnormal inputs to zero: a weight or activation part
// below 2^-126 in magnitude counts as 0, far inside the products' rounding
// bound (1e-5 of the sum of magnitudes; the tests' bound).
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "models/kernels/storage_product_kernels.h"

namespace castserve::models::internal {
namespace {

using casting::ElementType;

constexpr int64_t kTileFeatures = 16;  // A and C rows.
constexpr int64_t kTileColumns = 32;   // bf16 columns per A row (64 bytes).
constexpr int64_t kTileRows = 16;      // Activation rows per B and C tile.
constexpr int64_t kTileBytes = 1024;   // Every tile: 16 rows of 64 bytes.

// The tile configuration `ldtilecfg` reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig& Config() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  return config;
}

int64_t Steps(int64_t k) { return (k + kTileColumns - 1) / kTileColumns; }

int64_t RowGroups(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }

int64_t PackedBytes(int64_t rows, int parts, int64_t k) {
  return RowGroups(rows) * parts * Steps(k) * kTileBytes;
}

// Where the B tile of part p, row group g and column step s starts in the
// packed activations, in bf16 values.
inline int64_t PackedTile(int parts, int64_t steps, int64_t g, int p,
                          int64_t s) {
  return ((g * parts + p) * steps + s) * (kTileBytes / 2);
}

void Pack(const uint16_t* planes, int parts, int64_t rows, int64_t k,
          uint16_t* packed) {
  const int64_t steps = Steps(k);
  const int64_t pairs = k / 2;  // Whole column pairs.
  std::memset(packed, 0, PackedBytes(rows, parts, k));
  for (int64_t g = 0; g < RowGroups(rows); ++g) {
    const int64_t in_group = std::min(kTileRows, rows - g * kTileRows);
    const __mmask16 present =
        static_cast<__mmask16>((uint32_t{1} << in_group) - 1);
    for (int p = 0; p < parts; ++p) {
      // Row r's plane p starts (r * parts + p) * k values into `planes`;
      // the gather reads 4-byte pairs, so its offsets count pairs of the
      // rows of group g, from row g * 16's plane.
      const uint16_t* base = planes + (g * kTileRows * parts + p) * k;
      alignas(64) int32_t offsets[16];
      for (int64_t r = 0; r < kTileRows; ++r) {
        offsets[r] = static_cast<int32_t>(r < in_group ? r * parts * k : 0);
      }
      __m512i index = _mm512_load_si512(offsets);
      for (int64_t i = 0; i < pairs; ++i) {
        const int64_t s = (2 * i) / kTileColumns;
        const int64_t pair = i % (kTileColumns / 2);
        uint16_t* tile = packed + PackedTile(parts, steps, g, p, s);
        // Columns 2i and 2i + 1 of each row: one 32-bit word.
        const __m512i words = _mm512_mask_i32gather_epi32(
            _mm512_setzero_si512(), present, index, base + 2 * i, 2);
        _mm512_storeu_si512(tile + pair * 32, words);
      }
      if (k % 2 == 1) {  // The last column, alone in its pair.
        const int64_t c = k - 1;
        uint16_t* tile =
            packed + PackedTile(parts, steps, g, p, c / kTileColumns);
        const int64_t pair = (c % kTileColumns) / 2;
        for (int64_t r = 0; r < in_group; ++r) {
          tile[pair * 32 + r * 2] = base[r * parts * k + c];
        }
      }
    }
  }
}

// The bf16 bits of each 7-bit fp8 magnitude (NaN: a quiet NaN).
struct alignas(64) Fp8Table {
  uint16_t bits[128];
};

const Fp8Table& TableFor(ElementType type) {
  static const Fp8Table* const tables = [] {
    static Fp8Table t[2];
    const ElementType types[2] = {ElementType::kF8E4M3FN, ElementType::kF8E5M2};
    for (int i = 0; i < 2; ++i) {
      for (uint32_t m = 0; m < 128; ++m) {
        t[i].bits[m] = Fp8MagnitudeBf16(types[i], m);
      }
    }
    return t;
  }();
  return tables[type == ElementType::kF8E4M3FN ? 0 : 1];
}

// Writes n <= 32 weight values from `src` as the bf16 row of an A tile
// (32 values, zero-padded) at `dst`.
template <ElementType kW>
struct ALoader;

inline __mmask32 FirstN(int64_t n) {
  return static_cast<__mmask32>(n >= 32 ? ~uint32_t{0}
                                        : (uint32_t{1} << n) - 1);
}

template <>
struct ALoader<ElementType::kBF16> {
  explicit ALoader(ElementType) {}
  void Row(const uint8_t* src, int64_t n, uint16_t* dst) const {
    _mm512_store_si512(dst, _mm512_maskz_loadu_epi16(FirstN(n), src));
  }
};

struct Fp8ALoader {
  __m512i t0, t1, t2, t3;
  explicit Fp8ALoader(ElementType type) {
    const Fp8Table& t = TableFor(type);
    t0 = _mm512_load_si512(t.bits);
    t1 = _mm512_load_si512(t.bits + 32);
    t2 = _mm512_load_si512(t.bits + 64);
    t3 = _mm512_load_si512(t.bits + 96);
  }
  void Row(const uint8_t* src, int64_t n, uint16_t* dst) const {
    // Padding columns hold code 0: +0.
    const __m256i codes = _mm256_maskz_loadu_epi8(FirstN(n), src);
    const __m512i wide = _mm512_cvtepu8_epi16(codes);
    const __m512i m = _mm512_and_si512(wide, _mm512_set1_epi16(0x7F));
    // Index bits 0-5 pick one of 64 entries: the low or high half of the
    // table, chosen by bit 6.
    const __m512i low = _mm512_permutex2var_epi16(t0, m, t1);
    const __m512i high = _mm512_permutex2var_epi16(t2, m, t3);
    const __m512i v = _mm512_mask_blend_epi16(
        _mm512_test_epi16_mask(m, _mm512_set1_epi16(0x40)), low, high);
    const __m512i sign = _mm512_slli_epi16(
        _mm512_and_si512(wide, _mm512_set1_epi16(static_cast<int16_t>(0x80))),
        8);
    _mm512_store_si512(dst, _mm512_or_si512(v, sign));
  }
};

template <>
struct ALoader<ElementType::kF8E4M3FN> : Fp8ALoader {
  using Fp8ALoader::Fp8ALoader;
};
template <>
struct ALoader<ElementType::kF8E5M2> : Fp8ALoader {
  using Fp8ALoader::Fp8ALoader;
};

// Column steps whose A tiles are converted (fp8, partial tiles) ahead of
// their tile loads: a tile load of bytes just stored waits for the stores
// to reach the cache, so a strip is converted before its first load.
constexpr int64_t kStrip = 4;

// The features [f0, f_end) (at most 64) against row group g0, and g0 + 1
// where there is one, accumulated over every column step in C tiles, then
// scaled into y. With two row groups, 2 feature tiles x 2 row groups; with
// one, 4 feature tiles: 4 independent accumulations either way, so that a
// part's multiply-add does not wait for the previous part's.
template <ElementType kW>
void Block(const uint16_t* packed, int parts, int64_t rows, int64_t g0,
           const KernelWeight& w, const ALoader<kW>& loader, int64_t f0,
           int64_t f_end, float* y) {
  constexpr int64_t kBytes = casting::ElementSizeBytes(kW);
  const int64_t k = w.in_features;
  const int64_t steps = Steps(k);
  const bool two_g = RowGroups(rows) > g0 + 1;
  const int tiles = two_g ? 2 : 4;
  int64_t features[4] = {};
  for (int t = 0; t < tiles; ++t) {
    features[t] =
        std::clamp<int64_t>(f_end - f0 - t * kTileFeatures, 0, kTileFeatures);
  }
  // bf16 weights of whole tiles are loaded in place.
  auto direct = [&](int t, int64_t s) {
    return kW == ElementType::kBF16 && features[t] == kTileFeatures &&
           (s + 1) * kTileColumns <= k;
  };
  alignas(64) uint16_t strip[4][kStrip][kTileFeatures * kTileColumns];
  auto load_a = [&](int tile, int t, int64_t s, int64_t j) {
    const uint8_t* source;
    int64_t stride;
    if (direct(t, s)) {
      source = w.data + ((f0 + t * kTileFeatures) * k + s * kTileColumns) * 2;
      stride = k * 2;
    } else {
      source = reinterpret_cast<const uint8_t*>(strip[t][j]);
      stride = kTileColumns * 2;
    }
    if (tile == 4) {
      _tile_loadd(4, source, stride);
    } else {
      _tile_loadd(5, source, stride);
    }
  };
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s0 = 0; s0 < steps; s0 += kStrip) {
    const int64_t strip_steps = std::min(kStrip, steps - s0);
    // Row by row: the row's next strip prefetched (64 rows at a time are
    // more streams than the hardware prefetcher follows), then, unless its
    // tiles load in place, its strip of columns widened in one go (a few
    // whole cache lines).
    constexpr int64_t kStripBytes = kStrip * kTileColumns * kBytes;
    const bool next_strip = (s0 + kStrip) * kTileColumns < k;
    for (int t = 0; t < tiles; ++t) {
      if (features[t] == 0) continue;
      const bool in_place = direct(t, s0 + strip_steps - 1);
      for (int64_t f = 0; f < kTileFeatures; ++f) {
        if (f >= features[t]) {
          for (int64_t j = 0; j < strip_steps && !in_place; ++j) {
            _mm512_store_si512(strip[t][j] + f * kTileColumns,
                               _mm512_setzero_si512());
          }
          continue;
        }
        const uint8_t* row =
            w.data +
            ((f0 + t * kTileFeatures + f) * k + s0 * kTileColumns) * kBytes;
        for (int64_t line = 0; next_strip && line < kStripBytes; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(row + kStripBytes + line),
                       _MM_HINT_T0);
        }
        if (in_place) continue;
        for (int64_t j = 0; j < strip_steps; ++j) {
          const int64_t c0 = (s0 + j) * kTileColumns;
          loader.Row(row + j * kTileColumns * kBytes,
                     std::min(kTileColumns, k - c0),
                     strip[t][j] + f * kTileColumns);
        }
      }
    }
    for (int64_t j = 0; j < strip_steps; ++j) {
      const int64_t s = s0 + j;
      const uint16_t* b0 = packed + PackedTile(parts, steps, g0, 0, s);
      const int64_t part_stride = steps * (kTileBytes / 2);
      load_a(4, 0, s, j);
      if (features[1] > 0) load_a(5, 1, s, j);
      if (two_g) {
        const uint16_t* b1 = packed + PackedTile(parts, steps, g0 + 1, 0, s);
        for (int p = 0; p < parts; ++p) {
          _tile_loadd(6, b0 + p * part_stride, 64);
          _tile_dpbf16ps(0, 4, 6);
          if (features[1] > 0) _tile_dpbf16ps(2, 5, 6);
          _tile_loadd(7, b1 + p * part_stride, 64);
          _tile_dpbf16ps(1, 4, 7);
          if (features[1] > 0) _tile_dpbf16ps(3, 5, 7);
        }
        continue;
      }
      for (int p = 0; p < parts; ++p) {
        _tile_loadd(6, b0 + p * part_stride, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (features[1] > 0) _tile_dpbf16ps(1, 5, 6);
      }
      if (features[2] == 0) continue;
      load_a(4, 2, s, j);
      if (features[3] > 0) load_a(5, 3, s, j);
      for (int p = 0; p < parts; ++p) {
        _tile_loadd(7, b0 + p * part_stride, 64);
        _tile_dpbf16ps(2, 4, 7);
        if (features[3] > 0) _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  alignas(64) float c[4][kTileFeatures * kTileRows];
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  // C tile of feature tile t and row group g0 + gg.
  auto tile_of = [&](int t, int gg) { return two_g ? t * 2 + gg : t; };
  for (int t = 0; t < tiles; ++t) {
    for (int64_t f = 0; f < features[t]; ++f) {
      const int64_t feature = f0 + t * kTileFeatures + f;
      const float scale = w.scales.At(feature, 0);
      for (int gg = 0; gg < (two_g ? 2 : 1); ++gg) {
        const int64_t r0 = (g0 + gg) * kTileRows;
        const int64_t in_group = std::min(kTileRows, rows - r0);
        const float* sums = c[tile_of(t, gg)] + f * kTileRows;
        for (int64_t r = 0; r < in_group; ++r) {
          y[(r0 + r) * w.out_features + feature] = scale * sums[r];
        }
      }
    }
  }
}

template <ElementType kW>
void Product(const uint16_t* packed, int parts, int64_t rows,
             const KernelWeight& w, int64_t f_begin, int64_t f_end, float* y) {
  const ALoader<kW> loader(kW);
  const int64_t groups = RowGroups(rows);
  _tile_loadconfig(&Config());
  for (int64_t f0 = f_begin; f0 < f_end; f0 += 4 * kTileFeatures) {
    const int64_t f_last = std::min(f_end, f0 + 4 * kTileFeatures);
    for (int64_t g0 = 0; g0 < groups; g0 += 2) {
      if (groups - g0 == 1) {
        Block<kW>(packed, parts, rows, g0, w, loader, f0, f_last, y);
        continue;
      }
      const int64_t f_mid = std::min(f_last, f0 + 2 * kTileFeatures);
      Block<kW>(packed, parts, rows, g0, w, loader, f0, f_mid, y);
      if (f_mid < f_last) {
        Block<kW>(packed, parts, rows, g0, w, loader, f_mid, f_last, y);
      }
    }
  }
  _tile_release();
}

// Linux gives a process AMX's tile data only when asked
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
bool RequestTileData() {
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool AmxUsable() {
  // CPUID leaf 7: EDX bit 22 is AMX-BF16, bit 24 AMX-TILE (clang 14's
  // __builtin_cpu_supports knows neither).
  static const bool usable = [] {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned int amx = (1u << 22) | (1u << 24);
    return (edx & amx) == amx && RequestTileData();
  }();
  return usable;
}

const AmxKernelTable* AmxProductKernels() {
  static const AmxKernelTable table = [] {
    AmxKernelTable t = {};
    t.name = "amx_bf16";
    t.packed_bytes = &PackedBytes;
    t.pack = &Pack;
    t.product[static_cast<int>(ElementType::kBF16)] =
        &Product<ElementType::kBF16>;
    t.product[static_cast<int>(ElementType::kF8E4M3FN)] =
        &Product<ElementType::kF8E4M3FN>;
    t.product[static_cast<int>(ElementType::kF8E5M2)] =
        &Product<ElementType::kF8E5M2>;
    return t;
  }();
  return &table;
}

}  // namespace castserve::models::internal
