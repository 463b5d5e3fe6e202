// libFuzzer target: a KServe v2 REST inference body through
// DecodeRestInferRequest (JSON tensors and Triton's binary extension), and
// when it decodes, the decoded inputs sent back through
// EncodeRestInferResponse as outputs of the same names, datatypes, shapes
// and bytes, half of them binary. Neither may crash, hang or allocate past
// what the body's size explains; a decoded request must hold one raw entry
// per input. Built by tools/run_fuzzers.sh.
//
// The first input byte chooses the framing: bit 0 set, the next two bytes
// (little-endian) are the Inference-Header-Content-Length value; the rest
// is the body.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/rest/rest_infer_codec.h"

namespace {

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

// The decoded request's inputs as a response's outputs.
castserve::RestOutputFormat EchoOutputs(
    const castserve::RestInferRequest& decoded,
    inference::ModelInferResponse* response) {
  castserve::RestOutputFormat format = decoded.output_format;
  response->set_model_name(decoded.request.model_name());
  response->set_model_version("1");
  response->set_id(decoded.request.id());
  for (int i = 0; i < decoded.request.inputs_size(); ++i) {
    const auto& input = decoded.request.inputs(i);
    auto* output = response->add_outputs();
    output->set_name(input.name());
    output->set_datatype(input.datatype());
    *output->mutable_shape() = input.shape();
    *response->add_raw_output_contents() =
        decoded.request.raw_input_contents(i);
    if (i % 2 == 1) format.binary[input.name()] = true;
  }
  return format;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::optional<uint64_t> header_length;
  size_t offset = 1;
  if ((data[0] & 1) != 0) {
    if (size < 3) return 0;
    header_length = data[1] | (uint64_t{data[2]} << 8);
    offset = 3;
  }
  const absl::string_view body(reinterpret_cast<const char*>(data) + offset,
                               size - offset);
  absl::StatusOr<castserve::RestInferRequest> decoded =
      castserve::DecodeRestInferRequest(body, header_length, "m", "");
  if (!decoded.ok()) {
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument,
          "a body that does not decode is INVALID_ARGUMENT");
    return 0;
  }
  Check(decoded->request.raw_input_contents_size() ==
            decoded->request.inputs_size(),
        "one raw entry per input");
  inference::ModelInferResponse response;
  const castserve::RestOutputFormat format = EchoOutputs(*decoded, &response);
  absl::StatusOr<castserve::RestInferResponse> encoded =
      castserve::EncodeRestInferResponse(response, format);
  if (encoded.ok() && encoded->header_length.has_value()) {
    Check(*encoded->header_length <= encoded->body.size(),
          "the JSON fits in the body");
  }
  return 0;
}
