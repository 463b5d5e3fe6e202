#include "casting/codec/storage_format.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace castserve::casting {
namespace {

constexpr std::pair<absl::string_view, Scaling> kScalingNames[] = {
    {"none", Scaling::kNone},
    {"per_tensor", Scaling::kPerTensor},
    {"per_row", Scaling::kPerRow},
    {"per_block", Scaling::kPerBlock},
};

constexpr absl::string_view kPerBlockPrefix = "per_block_";

// a * b, or an error when it overflows int64.
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor size overflows int64: ", a, " * ", b));
  }
  return a * b;
}

}  // namespace

float Fp8MaxFinite(ElementType type) {
  return IsValidElementType(type) ? RowOf(type).fp8_max_finite : 0.0f;
}

absl::string_view ElementTypeName(ElementType type) {
  return IsValidElementType(type) ? RowOf(type).element_name : "INVALID";
}

absl::StatusOr<ElementType> ParseElementType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const DtypeRow& row : AllDtypeRows()) {
    if (!row.element.has_value()) continue;
    if (lower == absl::AsciiStrToLower(row.element_name)) return *row.element;
    for (absl::string_view alias : row.element_aliases) {
      if (!alias.empty() && lower == alias) return *row.element;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type \"", name,
                   "\"; expected one of: ", ElementTypeNameList()));
}

absl::string_view ScalingName(Scaling scaling) {
  for (const auto& [name, value] : kScalingNames) {
    if (value == scaling) return name;
  }
  return "invalid";
}

absl::Status StorageFormat::Validate() const {
  if (!IsValidElementType(element)) {
    return absl::InvalidArgumentError("invalid element type");
  }
  if (ScalingName(scaling) == "invalid") {
    return absl::InvalidArgumentError("invalid scaling");
  }
  if (is_scaled() && !IsFp8(element)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaling ", ScalingName(scaling), " needs an fp8 element type, not ",
        ElementTypeName(element)));
  }
  const bool blocked = scaling == Scaling::kPerBlock;
  const auto side_ok = [&](int32_t side) {
    return blocked ? side >= 1 && side <= kMaxScaleBlockSide : side == 0;
  };
  if (!side_ok(block_rows) || !side_ok(block_cols)) {
    return absl::InvalidArgumentError(
        blocked ? absl::StrCat("block size ", block_rows, "x", block_cols,
                               " is outside [1, ", kMaxScaleBlockSide, "]")
                : absl::StrCat("a block size needs per_block scaling, not ",
                               ScalingName(scaling)));
  }
  return absl::OkStatus();
}

std::string StorageFormat::ToString() const {
  if (!is_scaled()) return std::string(ElementTypeName(element));
  if (scaling == Scaling::kPerBlock) {
    return absl::StrCat(ElementTypeName(element), ":", kPerBlockPrefix,
                        block_rows, "x", block_cols);
  }
  return absl::StrCat(ElementTypeName(element), ":", ScalingName(scaling));
}

absl::StatusOr<Scaling> ParseScaling(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const auto& [scaling_name, scaling] : kScalingNames) {
    if (lower == scaling_name && scaling != Scaling::kPerBlock) return scaling;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scaling \"", name,
                   "\"; expected one of: none, per_tensor, per_row"));
}

namespace {

// "per_block_<rows>x<cols>" into `format`'s scaling and block size.
absl::Status ParsePerBlock(absl::string_view text, StorageFormat& format) {
  const std::string lower = absl::AsciiStrToLower(text);
  absl::string_view rest = lower;
  const std::vector<absl::string_view> sides =
      absl::ConsumePrefix(&rest, kPerBlockPrefix)
          ? absl::StrSplit(rest, 'x')
          : std::vector<absl::string_view>();
  if (sides.size() != 2 || !absl::SimpleAtoi(sides[0], &format.block_rows) ||
      !absl::SimpleAtoi(sides[1], &format.block_cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown scaling \"", text,
                     "\"; expected one of: none, per_tensor, per_row, "
                     "per_block_<rows>x<cols>"));
  }
  format.scaling = Scaling::kPerBlock;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StorageFormat> StorageFormat::Parse(absl::string_view text) {
  const size_t colon = text.find(':');
  StorageFormat format;
  absl::StatusOr<ElementType> element = ParseElementType(text.substr(0, colon));
  if (!element.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage format \"", text, "\": ", element.status().message()));
  }
  format.element = *element;
  if (colon != absl::string_view::npos) {
    const absl::string_view scaling_text = text.substr(colon + 1);
    absl::StatusOr<Scaling> scaling = ParseScaling(scaling_text);
    absl::Status status = scaling.status();
    if (scaling.ok()) {
      format.scaling = *scaling;
    } else {
      status = ParsePerBlock(scaling_text, format);
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("storage format \"", text, "\": ", status.message()));
    }
  }
  if (absl::Status status = format.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage format \"", text, "\": ", status.message()));
  }
  return format;
}

absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension ", dim, " in shape [",
                       absl::StrJoin(shape, ", "), "]"));
    }
    absl::StatusOr<int64_t> product = CheckedMul(count, dim);
    if (!product.ok()) return product.status();
    count = *product;
  }
  return count;
}

absl::StatusOr<std::vector<int64_t>> StorageFormat::ScaleShape(
    absl::Span<const int64_t> shape) const {
  if (absl::Status status = Validate(); !status.ok()) return status;
  absl::StatusOr<int64_t> num_elements = NumElements(shape);
  if (!num_elements.ok()) return num_elements.status();
  switch (scaling) {
    case Scaling::kNone:
      return std::vector<int64_t>();
    case Scaling::kPerTensor:
      return std::vector<int64_t>{1};
    case Scaling::kPerRow:
      return std::vector<int64_t>{shape.empty() ? 1 : shape[0]};
    case Scaling::kPerBlock:
      break;
  }
  if (shape.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("per-block scaling needs a tensor of rank >= 2, not [",
                     absl::StrJoin(shape, ", "), "]"));
  }
  const int64_t rows = shape[0];
  absl::StatusOr<int64_t> cols = NumElements(shape.subspan(1));
  if (!cols.ok()) return cols.status();  // Only when rows == 0.
  return std::vector<int64_t>{(rows + block_rows - 1) / block_rows,
                              (*cols + block_cols - 1) / block_cols};
}

absl::StatusOr<int64_t> StorageFormat::NumScales(
    absl::Span<const int64_t> shape) const {
  absl::StatusOr<std::vector<int64_t>> scale_shape = ScaleShape(shape);
  if (!scale_shape.ok()) return scale_shape.status();
  if (!is_scaled()) return 0;
  return NumElements(*scale_shape);
}

absl::StatusOr<int64_t> StorageFormat::DataBytes(
    absl::Span<const int64_t> shape) const {
  if (absl::Status status = Validate(); !status.ok()) return status;
  absl::StatusOr<int64_t> num_elements = NumElements(shape);
  if (!num_elements.ok()) return num_elements.status();
  return CheckedMul(*num_elements, element_size_bytes());
}

absl::StatusOr<int64_t> StorageFormat::ScaleBytes(
    absl::Span<const int64_t> shape) const {
  absl::StatusOr<int64_t> num_scales = NumScales(shape);
  if (!num_scales.ok()) return num_scales.status();
  return *num_scales * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<int64_t> StorageFormat::TotalBytes(
    absl::Span<const int64_t> shape) const {
  absl::StatusOr<int64_t> data_bytes = DataBytes(shape);
  if (!data_bytes.ok()) return data_bytes.status();
  absl::StatusOr<int64_t> scale_bytes = ScaleBytes(shape);
  if (!scale_bytes.ok()) return scale_bytes.status();
  if (*data_bytes > std::numeric_limits<int64_t>::max() - *scale_bytes) {
    return absl::InvalidArgumentError("tensor size overflows int64");
  }
  return *data_bytes + *scale_bytes;
}

absl::Span<const StorageFormat> AllStorageFormats() {
  static constexpr StorageFormat kFormats[] = {
      {ElementType::kF32, Scaling::kNone},
      {ElementType::kF16, Scaling::kNone},
      {ElementType::kBF16, Scaling::kNone},
      {ElementType::kF8E4M3FN, Scaling::kNone},
      {ElementType::kF8E5M2, Scaling::kNone},
      {ElementType::kF8E4M3FN, Scaling::kPerTensor},
      {ElementType::kF8E4M3FN, Scaling::kPerRow},
      {ElementType::kF8E5M2, Scaling::kPerTensor},
      {ElementType::kF8E5M2, Scaling::kPerRow},
  };
  return kFormats;
}

}  // namespace castserve::casting
