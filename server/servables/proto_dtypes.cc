#include "server/servables/proto_dtypes.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "casting/codec/dtype_table.h"
#include "casting/device/torch_types.h"

namespace castserve {
namespace {

// The element type whose canonical name is `enum_name` without `prefix`
// ("STORAGE_DTYPE_F8_E4M3FN" -> F8_E4M3FN), or INVALID_ARGUMENT naming
// `field` and `number`.
absl::StatusOr<casting::ElementType> ElementOfEnumName(
    absl::string_view enum_name, absl::string_view prefix,
    absl::string_view field, int number) {
  absl::StatusOr<casting::ElementType> element =
      absl::ConsumePrefix(&enum_name, prefix)
          ? casting::ElementTypeFromCanonicalName(enum_name)
          : absl::InvalidArgumentError("");
  if (!element.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ", field, " ", number));
  }
  return element;
}

}  // namespace

absl::StatusOr<std::string> DatatypeName(at::ScalarType dtype) {
  const casting::DtypeRow* row = casting::FindByTorchScalarType(dtype);
  if (row == nullptr || row->wire_name.empty()) {
    return absl::InternalError(
        absl::StrCat("no wire datatype for ", c10::toString(dtype)));
  }
  return std::string(row->wire_name);
}

absl::StatusOr<at::ScalarType> ScalarTypeFromDatatype(
    absl::string_view datatype) {
  absl::StatusOr<const casting::DtypeRow*> row =
      casting::FindByWireName(datatype);
  if (!row.ok()) return row.status();
  std::optional<at::ScalarType> dtype = casting::TorchScalarType((*row)->dtype);
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("datatype ", datatype,
                     " is not supported by castserve (no LibTorch dtype)"));
  }
  return *dtype;
}

inference::DataType ConfigDataType(at::ScalarType dtype) {
  const casting::DtypeRow* row = casting::FindByTorchScalarType(dtype);
  inference::DataType type = inference::TYPE_INVALID;
  if (row != nullptr && !row->config_name.empty() &&
      inference::DataType_Parse(std::string(row->config_name), &type)) {
    return type;
  }
  return inference::TYPE_INVALID;
}

absl::StatusOr<at::ScalarType> ScalarTypeFromConfig(inference::DataType type) {
  absl::StatusOr<const casting::DtypeRow*> row =
      type == inference::TYPE_INVALID
          ? absl::InvalidArgumentError("")
          : casting::FindByConfigName(inference::DataType_Name(type));
  if (!row.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data type ", static_cast<int>(type), " is not valid"));
  }
  return ScalarTypeFromDatatype((*row)->wire_name);
}

absl::StatusOr<casting::ElementType> ComputeElementType(
    inference::ComputeDtype dtype) {
  if (dtype == inference::COMPUTE_DTYPE_UNSPECIFIED) {
    return casting::ElementType::kF32;
  }
  return ElementOfEnumName(inference::ComputeDtype_Name(dtype),
                           "COMPUTE_DTYPE_", "compute_dtype",
                           static_cast<int>(dtype));
}

absl::StatusOr<casting::ElementType> StorageElementType(
    inference::StorageDtype dtype) {
  return ElementOfEnumName(inference::StorageDtype_Name(dtype),
                           "STORAGE_DTYPE_", "storage_dtype",
                           static_cast<int>(dtype));
}

absl::StatusOr<casting::Scaling> ScalingFromConfig(inference::Scaling scaling) {
  absl::string_view name = inference::Scaling_Name(scaling);
  absl::StatusOr<casting::Scaling> parsed =
      absl::ConsumePrefix(&name, "SCALING_") ? casting::ParseScaling(name)
                                             : absl::InvalidArgumentError("");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown scaling ", static_cast<int>(scaling)));
  }
  return parsed;
}

}  // namespace castserve
