// The dtype table's (casting/codec/dtype_table.h) protobuf and wire columns as
// the server sees them: KServe datatype strings, model_config.proto enums and
// LibTorch dtypes. The one place in server/ that translates dtypes; the
// protobuf enums are reached by their names (DataType_Parse of the table's
// config_name, and the STORAGE_DTYPE_/COMPUTE_DTYPE_/SCALING_ prefix plus the
// table's element or scaling name), so the table needs no protobuf and a new
// proto value named after its row needs no code here.
//
// Stateless free functions; thread-safe.
#ifndef CASTSERVE_SERVER_SERVABLES_PROTO_DTYPES_H_
#define CASTSERVE_SERVER_SERVABLES_PROTO_DTYPES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/core/ScalarType.h"
#include "casting/codec/storage_format.h"
#include "proto/model_config.pb.h"

namespace castserve {

// The wire datatype string ("FP32", "INT64", ...) of `dtype`; INTERNAL for a
// dtype the protocol has no name for (complex, quantized).
absl::StatusOr<std::string> DatatypeName(at::ScalarType dtype);

// The dtype of a datatype string. INVALID_ARGUMENT for strings the protocol
// does not define, and for UINT16/UINT32/UINT64/BYTES, which castserve holds
// in no LibTorch dtype.
absl::StatusOr<at::ScalarType> ScalarTypeFromDatatype(
    absl::string_view datatype);

// The model_config DataType enum of `dtype` (TYPE_INVALID if none).
inference::DataType ConfigDataType(at::ScalarType dtype);

// The dtype of a model_config DataType, with ScalarTypeFromDatatype's errors
// for the types castserve cannot hold; INVALID_ARGUMENT for TYPE_INVALID.
absl::StatusOr<at::ScalarType> ScalarTypeFromConfig(inference::DataType type);

// weights.casting's enums. COMPUTE_DTYPE_UNSPECIFIED is F32;
// STORAGE_DTYPE_UNSPECIFIED has no element type (no casting: the caller's
// case). INVALID_ARGUMENT naming the number for values the proto lacks.
absl::StatusOr<casting::ElementType> ComputeElementType(
    inference::ComputeDtype dtype);
absl::StatusOr<casting::ElementType> StorageElementType(
    inference::StorageDtype dtype);
absl::StatusOr<casting::Scaling> ScalingFromConfig(inference::Scaling scaling);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_PROTO_DTYPES_H_
