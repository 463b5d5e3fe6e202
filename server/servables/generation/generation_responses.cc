#include "server/servables/generation/generation_responses.h"

#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/length_prefixed.h"
#include "server/servables/generation/generation_signature.h"

namespace castserve {
namespace {

// One BYTES element, length-prefixed as raw contents carry it.
void AddOutput(const char* name, const char* datatype,
               std::initializer_list<int64_t> shape, std::string raw,
               inference::ModelInferResponse& response) {
  auto* output = response.add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  response.add_raw_output_contents(std::move(raw));
}

template <typename T>
void AppendRaw(const T& value, std::string& raw) {
  raw.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// The log-probability outputs of the last `count` tokens of `sequence`
// (its logprobs and texts hold at least that many: asserted by the caller).
void AddLogprobOutputs(const GenerationSequence& sequence, size_t count,
                       inference::ModelInferResponse& response) {
  const int64_t top = sequence.parameters.sampling.top_logprobs;
  const size_t first = sequence.logprobs.size() - count;
  const bool text = sequence.text;
  std::string logprobs, top_ids, top_logprobs, tokens, top_tokens;
  for (size_t i = first; i < sequence.logprobs.size(); ++i) {
    const models::TokenLogprobs& entry = sequence.logprobs[i];
    AppendRaw(entry.logprob, logprobs);
    // Fewer alternatives than asked only when the vocabulary is smaller:
    // never, for the vocabularies castserve serves; padded to keep the
    // shape.
    for (int64_t k = 0; k < top; ++k) {
      const bool has = k < static_cast<int64_t>(entry.top_ids.size());
      AppendRaw(has ? entry.top_ids[k] : int64_t{-1}, top_ids);
      AppendRaw(
          has ? entry.top_logprobs[k] : -std::numeric_limits<float>::infinity(),
          top_logprobs);
      if (text) {
        platform::AppendLengthPrefixed(
            has ? absl::string_view(sequence.top_token_texts[i * top + k])
                : absl::string_view(),
            &top_tokens);
      }
    }
    if (text) platform::AppendLengthPrefixed(sequence.token_texts[i], &tokens);
  }
  const auto n = static_cast<int64_t>(count);
  auto add = [&](const char* name, const char* datatype,
                 std::initializer_list<int64_t> shape, std::string& raw) {
    if (sequence.Wants(name)) {
      AddOutput(name, datatype, shape, std::move(raw), response);
    }
  };
  add(kOutputLogprobsTensor, "FP32", {n}, logprobs);
  if (text) add(kOutputTokensTensor, "BYTES", {n}, tokens);
  if (top == 0) return;
  add(kOutputTopIdsTensor, "INT64", {n, top}, top_ids);
  add(kOutputTopLogprobsTensor, "FP32", {n, top}, top_logprobs);
  if (text) add(kOutputTopTokensTensor, "BYTES", {n, top}, top_tokens);
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
      raw = platform::JoinLengthPrefixed({raw.substr(4) + rest});
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
    AddOutput(kTextOutputTensor, "BYTES", {1},
              platform::JoinLengthPrefixed({*text}), response);
  }
  if (sequence.Wants(kOutputIdsTensor)) {
    AddOutput(kOutputIdsTensor, "INT64", {static_cast<int64_t>(ids.size())},
              std::string(reinterpret_cast<const char*>(ids.data()),
                          ids.size() * sizeof(int64_t)),
              response);
  }
  // Fewer entries only when the engine gave none: WriteFinalResponse
  // fails the request then.
  if (sequence.logprobs_asked() && sequence.logprobs.size() >= ids.size() &&
      (!sequence.text || sequence.token_texts.size() >= ids.size())) {
    AddLogprobOutputs(sequence, ids.size(), response);
  }
  return response;
}

absl::Status WriteFinalResponse(GenerationSequence& sequence,
                                const models::GenerationResult& result) {
  if (sequence.logprobs_asked() &&
      (sequence.logprobs.size() != result.tokens.size() ||
       (sequence.text &&
        sequence.token_texts.size() != result.tokens.size()))) {
    return absl::InternalError(absl::StrCat(
        "the engine gave log-probabilities for ", sequence.logprobs.size(),
        " of ", result.tokens.size(), " tokens"));
  }
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
