#include "server/servables/generation/generation_responses.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/servables/generation/generation_signature.h"

namespace castserve {
namespace {

// One BYTES element, length-prefixed as raw contents carry it.
std::string RawBytesElement(absl::string_view bytes) {
  std::string raw(4, '\0');
  const auto length = static_cast<uint32_t>(bytes.size());
  std::memcpy(raw.data(), &length, 4);
  raw.append(bytes.data(), bytes.size());
  return raw;
}

void SetFinal(inference::ModelInferResponse& response, bool final) {
  (*response.mutable_parameters())["triton_final_response"].set_bool_param(
      final);
}

// The response with no outputs that ends a stream with
// triton_enable_empty_final_response.
inference::ModelInferResponse EmptyResponse(
    const GenerationSequence& sequence) {
  inference::ModelInferResponse response;
  response.set_model_name(sequence.call.request->model_name());
  response.set_model_version("1");
  response.set_id(sequence.call.request->id());
  return response;
}

// Streaming: the final response, from the held one (the last token's) with
// `rest` (the text held back) appended, or one without an id.
inference::ModelInferResponse FinalStreamResponse(GenerationSequence& sequence,
                                                  const std::string& rest) {
  // Without a held response (the engine ended the sequence on its own)
  // the final one carries no id, only the text held back.
  const bool held = sequence.held.has_value();
  inference::ModelInferResponse last =
      held ? *std::move(sequence.held)
           : TokenResponse(sequence, {}, sequence.text ? &rest : nullptr);
  sequence.held.reset();
  if (held && !rest.empty()) {
    for (int i = 0; i < last.outputs_size(); ++i) {
      if (last.outputs(i).name() != kTextOutputTensor) continue;
      std::string& raw = *last.mutable_raw_output_contents(i);
      raw = RawBytesElement(raw.substr(4) + rest);
    }
  }
  if (!sequence.parameters.empty_final_response) return last;
  sequence.call.partial_response(std::move(last));
  return EmptyResponse(sequence);
}

}  // namespace

inference::ModelInferResponse TokenResponse(const GenerationSequence& sequence,
                                            absl::Span<const int64_t> ids,
                                            const std::string* text) {
  inference::ModelInferResponse response = EmptyResponse(sequence);
  SetFinal(response, false);
  if (text != nullptr && sequence.Wants(kTextOutputTensor)) {
    auto* output = response.add_outputs();
    output->set_name(kTextOutputTensor);
    output->set_datatype("BYTES");
    output->add_shape(1);
    response.add_raw_output_contents(RawBytesElement(*text));
  }
  if (sequence.Wants(kOutputIdsTensor)) {
    auto* output = response.add_outputs();
    output->set_name(kOutputIdsTensor);
    output->set_datatype("INT64");
    output->add_shape(static_cast<int64_t>(ids.size()));
    response.add_raw_output_contents(
        std::string(reinterpret_cast<const char*>(ids.data()),
                    ids.size() * sizeof(int64_t)));
  }
  return response;
}

absl::Status WriteFinalResponse(GenerationSequence& sequence,
                                const models::GenerationResult& result) {
  std::string rest;
  if (sequence.text_stream) {
    absl::StatusOr<std::string> flushed = sequence.text_stream->Flush();
    if (!flushed.ok()) return flushed.status();
    rest = *std::move(flushed);
  }
  const bool stop_string =
      sequence.text_stream && sequence.text_stream->stopped();
  const std::string finish_reason =
      !stop_string &&
              result.stop == models::GenerationResult::Stop::kMaxNewTokens
          ? "length"
          : "stop";
  inference::ModelInferResponse final_response;
  if (!sequence.call.partial_response) {
    sequence.whole_text += rest;
    final_response =
        TokenResponse(sequence, result.tokens,
                      sequence.text ? &sequence.whole_text : nullptr);
  } else {
    final_response = FinalStreamResponse(sequence, rest);
  }
  SetFinal(final_response, true);
  (*final_response.mutable_parameters())["finish_reason"].set_string_param(
      finish_reason);
  (*final_response.mutable_parameters())["prompt_tokens"].set_int64_param(
      sequence.prompt_tokens);
  if (static_cast<int64_t>(final_response.ByteSizeLong()) >
      sequence.call.max_response_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the response has ", final_response.ByteSizeLong(),
        " bytes, above the limit of ", sequence.call.max_response_bytes,
        " (--max-message-bytes)"));
  }
  *sequence.call.response = std::move(final_response);
  return absl::OkStatus();
}

}  // namespace castserve
