// KServe v2 REST inference bodies <-> the protobuf messages every protocol
// shares (proto/inference.proto): JSON tensors and Triton's binary tensor
// extension. Only the wire form is decided here; what a request may ask of
// a model (datatypes, shapes, sizes, outputs) is checked once, by the
// served model, on the decoded ModelInferRequest, as for gRPC.
//
// Request: a JSON object {"id", "parameters", "inputs": [{"name", "shape",
// "datatype", "parameters", "data"}], "outputs": [{"name", "parameters"}]}.
// "data" is the tensor's elements in row-major order, flat or nested:
// booleans for BOOL, integers for the integer types (in range), numbers for
// FP16/BF16/FP32/FP64, strings for BYTES. With the binary extension the
// JSON is the body's first Inference-Header-Content-Length bytes, and an
// input whose parameters hold "binary_data_size" takes that many bytes of
// what follows, in input order (BYTES elements each a 4-byte little-endian
// length and the bytes, as in raw contents). Every input becomes raw
// contents. Parameter values become InferParameters (bool, int64 or uint64,
// double, string); "binary_data_output" (request) and "binary_data"
// (output) say which outputs come back binary and are not passed on.
//
// Response: {"model_name", "model_version", "id", "outputs": [{"name",
// "datatype", "shape", "data"}]}, or for a binary output "parameters":
// {"binary_data_size": N} and its raw bytes after the JSON, whose length is
// then returned for the Inference-Header-Content-Length header.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_REST_REST_INFER_CODEC_H_
#define CASTSERVE_SERVER_REST_REST_INFER_CODEC_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/inference.pb.h"

namespace castserve {

// Which outputs the client wants as binary data.
struct RestOutputFormat {
  // The request's "binary_data_output" parameter: the default for outputs.
  bool binary_by_default = false;
  // An output's own "binary_data" parameter, by output name.
  std::map<std::string, bool> binary;

  bool IsBinary(const std::string& output) const;
};

struct RestInferRequest {
  inference::ModelInferRequest request;
  RestOutputFormat output_format;
};

// Nesting deeper than this is refused before anything is built: the
// request's object, "inputs", an input, then one level per dimension.
inline constexpr int kMaxRestJsonDepth = 40;

// The most JSON text of one request castserve parses (the binary part of
// Triton's binary tensor extension is not counted). Parsed JSON takes about
// eight times its text in memory (one 16-byte value per number), so a body
// as large as --max-message-bytes allows would take gigabytes; tensors that
// large go in binary (`binary_data_size`). Over it: InvalidArgument (400)
// saying so.
inline constexpr size_t kMaxRestJsonBytes = size_t{32} << 20;

// Decodes a request body for `model` (and `version`, may be empty), with
// the Inference-Header-Content-Length header's value when the request has
// one. INVALID_ARGUMENT naming the field and what was expected for any
// body that is not such a request.
absl::StatusOr<RestInferRequest> DecodeRestInferRequest(
    absl::string_view body, std::optional<uint64_t> header_length,
    absl::string_view model, absl::string_view version);

struct RestInferResponse {
  std::string body;
  // Set when binary outputs follow the JSON: the JSON's length.
  std::optional<size_t> header_length;
};

// The elements of `response`'s output `index` as a flat JSON array
// (strings for BYTES), as EncodeRestInferResponse writes "data"; INTERNAL
// as there.
absl::StatusOr<nlohmann::json> RestOutputData(
    const inference::ModelInferResponse& response, int index);

// INTERNAL when an output's raw contents do not fit its datatype (a
// served model's bug, not the client's).
absl::StatusOr<RestInferResponse> EncodeRestInferResponse(
    const inference::ModelInferResponse& response,
    const RestOutputFormat& format);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_INFER_CODEC_H_
