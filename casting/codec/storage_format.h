// Storage formats: how a weight's elements are laid out between forwards.
//
// A format is plain data: an element type plus a scaling mode. Plain formats
// (F32, F16, BF16, F8_E4M3FN, F8_E5M2 with Scaling::kNone) are element-wise
// casts. Scaled formats are fp8 elements plus f32 absmax scales, one for the
// whole tensor or one per output row (dim 0), stored after the data so that
// small weights are not flushed to zero. Value semantics; thread-compatible.
//
// Element types and their names come from the dtype table
// (casting/codec/dtype_table.h); this file adds the scaling and the sizes.
//
// Text syntax (ToString / Parse): the element name, optionally followed by
// ":per_tensor", ":per_row" or ":per_block_<rows>x<cols>", e.g. "BF16",
// "F8_E4M3FN:per_row", "F8_E4M3FN:per_block_128x128".
#ifndef CASTSERVE_CASTING_CODEC_STORAGE_FORMAT_H_
#define CASTSERVE_CASTING_CODEC_STORAGE_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "casting/codec/dtype_table.h"

namespace castserve::casting {

enum class Scaling : uint8_t {
  kNone = 0,       // Plain cast.
  kPerTensor = 1,  // One f32 scale for the tensor.
  kPerRow = 2,     // One f32 scale per index of dim 0.
  kPerBlock = 3,   // One f32 scale per 2-D block (StorageFormat::block_*).
};

// The largest block side a per-block format may have.
inline constexpr int32_t kMaxScaleBlockSide = 1 << 16;

// The element attributes below are read from the dtype table
// (casting/codec/dtype_table.h), where each ElementType has its row.

constexpr bool IsValidElementType(ElementType type) {
  return static_cast<int>(type) >= 0 &&
         static_cast<int>(type) < kNumElementTypes;
}

// Bytes per element; 0 for a value that is no ElementType.
constexpr int64_t ElementSizeBytes(ElementType type) {
  return IsValidElementType(type) ? RowOf(type).bits / 8 : 0;
}

constexpr bool IsFp8(ElementType type) {
  return IsValidElementType(type) && RowOf(type).fp8_max_finite > 0;
}

// Types a layer can compute in (and that the codec can encode from).
constexpr bool IsComputeType(ElementType type) {
  return IsValidElementType(type) && RowOf(type).compute;
}

// Largest finite value of an fp8 type (448 or 57344); 0 for other types.
float Fp8MaxFinite(ElementType type);

// Canonical names: "F32", "F16", "BF16", "F8_E4M3FN", "F8_E5M2".
absl::string_view ElementTypeName(ElementType type);
// Accepts the canonical names case-insensitively plus the usual aliases
// (float32, fp32, float16, fp16, half, bfloat16, float8_e4m3fn, F8_E4M3 as
// safetensors spells it, float8_e5m2, ...).
absl::StatusOr<ElementType> ParseElementType(absl::string_view name);

absl::string_view ScalingName(Scaling scaling);  // "none", "per_tensor", ...
// The inverse of ScalingName, case-insensitive; errors list the valid names.
// "per_block" is not among them: a per-block format needs its block size,
// which only StorageFormat::Parse reads.
absl::StatusOr<Scaling> ParseScaling(absl::string_view name);

struct StorageFormat {
  ElementType element = ElementType::kF32;
  Scaling scaling = Scaling::kNone;
  // kPerBlock only: a block's rows (of dim 0) and columns (of the flattened
  // other dims), each in [1, kMaxScaleBlockSide]; 0 for other scalings.
  int32_t block_rows = 0;
  int32_t block_cols = 0;

  static StorageFormat Plain(ElementType element) {
    return {element, Scaling::kNone};
  }
  static StorageFormat PerBlock(ElementType element, int32_t block_rows,
                                int32_t block_cols) {
    return {element, Scaling::kPerBlock, block_rows, block_cols};
  }

  bool is_scaled() const { return scaling != Scaling::kNone; }
  int64_t element_size_bytes() const { return ElementSizeBytes(element); }

  // Scaling is only defined for fp8 elements.
  absl::Status Validate() const;

  std::string ToString() const;
  // Inverse of ToString; errors name the offending part and the valid values.
  static absl::StatusOr<StorageFormat> Parse(absl::string_view text);

  // Sizes for a tensor of `shape` (row = index of dim 0; a rank-0 tensor is
  // one row). Errors for negative dimensions, overflow or invalid formats,
  // and for a per-block format on a tensor of rank < 2.
  absl::StatusOr<int64_t> NumScales(absl::Span<const int64_t> shape) const;
  // The scale tensor's shape for a tensor of `shape`, as documented above:
  // [] when unscaled, [1], [rows], or [block rows, block columns].
  absl::StatusOr<std::vector<int64_t>> ScaleShape(
      absl::Span<const int64_t> shape) const;
  absl::StatusOr<int64_t> DataBytes(absl::Span<const int64_t> shape) const;
  absl::StatusOr<int64_t> ScaleBytes(absl::Span<const int64_t> shape) const;
  // Data plus scales, i.e. what a resident copy occupies.
  absl::StatusOr<int64_t> TotalBytes(absl::Span<const int64_t> shape) const;
};

inline bool operator==(const StorageFormat& a, const StorageFormat& b) {
  return a.element == b.element && a.scaling == b.scaling &&
         a.block_rows == b.block_rows && a.block_cols == b.block_cols;
}
inline bool operator!=(const StorageFormat& a, const StorageFormat& b) {
  return !(a == b);
}

// Number of elements of `shape`, with errors for negative dims and overflow.
absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape);

// Every valid storage format but the per-block ones (one per block size):
// the five plain ones, then fp8 per tensor and per row. For tests, benchmarks
// and checks that sweep formats; the per-block kernels have their own tests.
absl::Span<const StorageFormat> AllStorageFormats();

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_CODEC_STORAGE_FORMAT_H_
