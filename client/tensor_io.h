// Tensors for castserve-client: JSON input files to a ModelInferRequest, and
// the response's raw outputs to JSON or .npy files. Little-endian, row-major,
// as on the wire. Stateless free functions; thread-safe.
#ifndef CASTSERVE_CLIENT_TENSOR_IO_H_
#define CASTSERVE_CLIENT_TENSOR_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace castserve {

// Adds the inputs of `json` to `request` as raw contents, one per input in
// name order. The format:
//   {"input_ids": {"datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]}}
// `data` is flat or nested (flattened row-major); its element count must
// match `shape`. Datatypes: BOOL, UINT8, INT8, INT16, INT32, INT64, FP16,
// BF16, FP32, FP64 (INT64 values beyond 2^53 lose precision in JSON), and
// BYTES with strings as data:
//   {"text": {"datatype": "BYTES", "shape": [2, 1], "data": ["a", "b"]}}
absl::Status AddInputsFromJson(const std::string& json,
                               inference::ModelInferRequest* request);

// Adds input `name` from the bytes of a .npy file (C order; dtypes <f2 <f4
// <f8 <i8 <i4 <i2 |i1 |u1 |b1).
absl::Status AddInputFromNpy(const std::string& name, const std::string& npy,
                             inference::ModelInferRequest* request);

// Adds every tensor of a .safetensors file, in name order (dtypes F16 BF16
// F32 F64 I64 I32 I16 I8 U8 BOOL).
absl::Status AddInputsFromSafetensors(const std::string& safetensors,
                                      inference::ModelInferRequest* request);

// Every output of `response` as one JSON object, in the input file's format.
// FP16/BF16 are written as their float values.
absl::StatusOr<std::string> OutputsToJson(
    const inference::ModelInferResponse& response);

// The output `index` of `response` as the bytes of a .npy file (format 1.0).
// BF16 becomes float32 (NumPy has no bfloat16).
absl::StatusOr<std::string> OutputToNpy(
    const inference::ModelInferResponse& response, int index);

}  // namespace castserve

#endif  // CASTSERVE_CLIENT_TENSOR_IO_H_
