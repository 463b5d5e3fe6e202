#include "casting/storage_format.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace castserve::casting {
namespace {

constexpr std::pair<absl::string_view, Scaling> kScalingNames[] = {
    {"none", Scaling::kNone},
    {"per_tensor", Scaling::kPerTensor},
    {"per_row", Scaling::kPerRow},
};

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
  return absl::OkStatus();
}

std::string StorageFormat::ToString() const {
  if (!is_scaled()) return std::string(ElementTypeName(element));
  return absl::StrCat(ElementTypeName(element), ":", ScalingName(scaling));
}

absl::StatusOr<Scaling> ParseScaling(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const auto& [scaling_name, scaling] : kScalingNames) {
    if (lower == scaling_name) return scaling;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scaling \"", name,
                   "\"; expected one of: none, per_tensor, per_row"));
}

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
    absl::StatusOr<Scaling> scaling = ParseScaling(text.substr(colon + 1));
    if (!scaling.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "storage format \"", text, "\": ", scaling.status().message()));
    }
    format.scaling = *scaling;
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

absl::StatusOr<int64_t> StorageFormat::NumScales(
    absl::Span<const int64_t> shape) const {
  if (absl::Status status = Validate(); !status.ok()) return status;
  absl::StatusOr<int64_t> num_elements = NumElements(shape);
  if (!num_elements.ok()) return num_elements.status();
  switch (scaling) {
    case Scaling::kNone:
      return 0;
    case Scaling::kPerTensor:
      return 1;
    case Scaling::kPerRow:
      return shape.empty() ? 1 : shape[0];
  }
  return 0;
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
