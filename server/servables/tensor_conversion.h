// Tensors between the wire (KServe v2 ModelInferRequest/Response) and
// LibTorch (models::NamedTensors): the one place where protobuf messages meet
// tensors. Every tensor rule of docs/PROTOCOL.md is checked here, each failure
// an INVALID_ARGUMENT whose message names the tensor and what was expected.
//
// Datatype names come from the dtype table through
// server/servables/proto_dtypes.h.
//
// Stateless free functions; thread-safe.
#ifndef CASTSERVE_SERVER_SERVABLES_TENSOR_CONVERSION_H_
#define CASTSERVE_SERVER_SERVABLES_TENSOR_CONVERSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "c10/core/ScalarType.h"
#include "models/model.h"
#include "proto/inference.pb.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/proto_dtypes.h"

namespace castserve {

class TextInput;  // server/servables/text_input.h

// Inputs of `request` as tensors on the CPU, validated against the
// signature `specs` (shapes include the batch dimension first, -1 =
// variable). With `max_batch_size` > 0 the first dimension of every input is
// the batch: between 1 and max_batch_size and equal across inputs.
// Data is little-endian, row-major, either all raw or all typed.
absl::StatusOr<models::NamedTensors> InputsFromRequest(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& specs, int64_t max_batch_size);

// The strings of the request's BYTES input at `index` (shape [n] or [n, 1],
// n >= 1 and within `max_batch_size` when > 0; raw length-prefixed or
// bytes_contents; each at most kMaxTextBytes): INVALID_ARGUMENT naming the
// input otherwise.
absl::StatusOr<std::vector<std::string>> StringsOfInput(
    const inference::ModelInferRequest& request, int index,
    int64_t max_batch_size);

// The names of the outputs `request` asks for, in its order; empty when it
// asks for none (= all). INVALID_ARGUMENT for a name not in `specs` or
// requested twice.
absl::StatusOr<std::vector<std::string>> RequestedOutputs(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& specs);

// A wire request that passed every check of the request edge: names,
// datatypes, shapes against the signature, the batch limit, byte sizes and
// the requested outputs.
struct DecodedRequest {
  models::NamedTensors inputs;
  // Empty means all.
  std::vector<std::string> requested_outputs;
  // The common first dimension with max_batch_size > 0, else 1.
  int64_t batch_size = 1;
};

// The one validation of a wire request (RequestedOutputs, then
// InputsFromRequest): what the served model checks where a request enters,
// before anything is queued. The model's own limits (vocabulary, position
// table) follow in models::Model::CheckLimits.
//
// A request with a `text` input (text_input.h: BYTES, shape [batch, 1] or
// [batch], raw length-prefixed or bytes_contents, each string at most
// kMaxTextBytes) gets its token inputs from `text` instead; inputs text does
// not fill (an image-text model's pixel_values) may come beside it, with as
// many batch elements. INVALID_ARGUMENT for text beside a token input, for
// text when `text` is null (no tokenizer) or unavailable (its reason), and
// for a request with no input at all.
absl::StatusOr<DecodedRequest> DecodeRequest(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& input_specs,
    const std::vector<models::TensorSpec>& output_specs, int64_t max_batch_size,
    const TextInput* text = nullptr);

// The signature `specs` in wire terms (datatype strings), as the servable
// interface shows it; "" for a dtype the protocol has no name for.
std::vector<TensorSpec> WireSpecs(const std::vector<models::TensorSpec>& specs);

// Fills `response` (model name, version "1", request id, one output entry
// and one raw_output_contents entry per tensor) from `outputs`. With
// `requested` empty every output is returned, in the order of `specs`
// (then any not in `specs`, by name); otherwise those named, in that order.
// INTERNAL if a requested output is missing or has an unnamed dtype.
absl::Status FillResponse(const inference::ModelInferRequest& request,
                          const std::vector<models::TensorSpec>& specs,
                          const std::vector<std::string>& requested,
                          const models::NamedTensors& outputs,
                          inference::ModelInferResponse* response);

// FillResponse, then RESOURCE_EXHAUSTED when the response is larger than
// `max_response_bytes` (--max-message-bytes): the response a served model
// writes for an InferenceCall.
absl::Status FillResponseWithin(const inference::ModelInferRequest& request,
                                const std::vector<models::TensorSpec>& specs,
                                const std::vector<std::string>& requested,
                                const models::NamedTensors& outputs,
                                int64_t max_response_bytes,
                                inference::ModelInferResponse* response);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_TENSOR_CONVERSION_H_
