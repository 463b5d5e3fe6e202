#include "casting/codec/dtype_table.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace castserve::casting {
namespace {

// The row whose `column` is `name`; empty names never match.
const DtypeRow* FindRow(absl::string_view DtypeRow::*column,
                        absl::string_view name) {
  if (name.empty()) return nullptr;
  for (const DtypeRow& row : kDtypeRows) {
    if (row.*column == name) return &row;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<const DtypeRow*> FindByCheckpointName(absl::string_view name) {
  if (const DtypeRow* row = FindRow(&DtypeRow::checkpoint_name, name)) {
    return row;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

absl::StatusOr<const DtypeRow*> FindByWireName(absl::string_view name) {
  if (const DtypeRow* row = FindRow(&DtypeRow::wire_name, name)) return row;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown datatype '", name,
                   "' (datatypes are upper case, e.g. FP32, INT64)"));
}

absl::StatusOr<const DtypeRow*> FindByConfigName(absl::string_view name) {
  if (const DtypeRow* row = FindRow(&DtypeRow::config_name, name)) return row;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data type '", name, "' (e.g. TYPE_FP32)"));
}

absl::StatusOr<const DtypeRow*> FindByTorchStorageClass(
    absl::string_view name) {
  if (const DtypeRow* row = FindRow(&DtypeRow::torch_storage_class, name)) {
    return row;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown storage class '", name, "'"));
}

absl::StatusOr<ElementType> ElementTypeFromCanonicalName(
    absl::string_view name) {
  const DtypeRow* row = FindRow(&DtypeRow::element_name, name);
  if (row != nullptr) return *row->element;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type \"", name,
                   "\"; expected one of: ", ElementTypeNameList()));
}

std::string ElementTypeNameList() {
  std::vector<absl::string_view> names;
  for (int id = 0; id < kNumElementTypes; ++id) {
    names.push_back(RowOf(static_cast<ElementType>(id)).element_name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace castserve::casting
