// Triton's generate extension (POST /v2/models/{name}/generate and
// generate_stream) <-> the protobuf messages every protocol shares: a
// generate body becomes an ordinary ModelInferRequest, so generation over
// REST is validated and run exactly as over gRPC.
//
// Request: a JSON object. A key naming one of the model's inputs gives that
// input's value: one element (a string for BYTES, a number, a boolean) or a
// flat array of them ("text_input": "Hello", "input_ids": [1, 2, 3]); its
// datatype comes from the model's metadata, its shape is [n] (with leading
// 1s to the input's rank). "parameters" is an object of request parameters
// and "id" a string. A top-level key naming a generation parameter
// (generation_parameter_names.h's kGenerationParameterNames: max_tokens,
// temperature, ...) is taken as a parameter too, as Triton's generate
// examples send them. Any other key: INVALID_ARGUMENT naming it. A parameter's
// value is a boolean, a number or a string; an array (stop: ["\n", "."],
// stop_token_ids: [2]) is passed on as its JSON text, the form the generation
// parameters take.
//
// Response: one JSON object {"model_name", "model_version", "id" (when the
// request had one), one key per output: a BYTES output of one element as
// that string ("text_output"), any other output as a flat array
// ("output_ids": [...]), and "finish_reason" when the response carries
// that parameter}. generate_stream sends one such object per response as a
// server-sent event ("data: <json>\n\n").
//
// Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_REST_REST_GENERATE_CODEC_H_
#define CASTSERVE_SERVER_REST_REST_GENERATE_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/inference.pb.h"

namespace castserve {

// Decodes a generate body for `model` (`version` may be empty) whose
// inputs `metadata` describes. INVALID_ARGUMENT naming the key for a body
// that is not such a request.
absl::StatusOr<inference::ModelInferRequest> DecodeGenerateRequest(
    absl::string_view body, absl::string_view model, absl::string_view version,
    const inference::ModelMetadataResponse& metadata);

// The JSON text of one response; INTERNAL when an output's raw contents do
// not fit its datatype.
absl::StatusOr<std::string> EncodeGenerateResponse(
    const inference::ModelInferResponse& response);

// `json_text` as one server-sent event: "data: <json_text>\n\n".
std::string ServerSentEvent(absl::string_view json_text);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_GENERATE_CODEC_H_
