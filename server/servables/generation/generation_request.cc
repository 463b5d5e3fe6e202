#include "server/servables/generation/generation_request.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/sanitized_text.h"
#include "server/servables/tensor_conversion.h"
#include "text/unicode/unicode.h"

namespace castserve {
namespace {

// The outputs `request` names (empty: all); InvalidArgument for one that
// is not an output or is named twice.
absl::StatusOr<std::vector<std::string>> RequestedOutputs(
    const inference::ModelInferRequest& request,
    const std::vector<TensorSpec>& outputs) {
  std::vector<std::string> names;
  for (const auto& output : request.outputs()) {
    const bool known = std::any_of(
        outputs.begin(), outputs.end(),
        [&](const TensorSpec& s) { return s.name == output.name(); });
    if (!known ||
        std::find(names.begin(), names.end(), output.name()) != names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "requested output '", platform::SanitizeText(output.name(), 64),
          "' is not an output of the model or is requested twice"));
    }
    names.push_back(output.name());
  }
  return names;
}

// The one string of the BYTES input at `index`, valid UTF-8.
absl::StatusOr<std::string> StringOfInput(
    const inference::ModelInferRequest& request, int index) {
  absl::StatusOr<std::vector<std::string>> strings =
      StringsOfInput(request, index, /*max_batch_size=*/1);
  if (!strings.ok()) return strings.status();
  if (!text::IsValidUtf8(strings->front())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", request.inputs(index).name(), "' is not valid UTF-8"));
  }
  return std::move(strings->front());
}

absl::StatusOr<std::vector<int64_t>> Encode(const text::Tokenizer& tokenizer,
                                            const std::string& text,
                                            bool add_special_tokens,
                                            absl::string_view input) {
  text::EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  absl::StatusOr<text::Encoding> encoding = tokenizer.Encode(text, options);
  if (!encoding.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", input, "': ", encoding.status().message()));
  }
  return std::move(encoding->ids);
}

absl::StatusOr<std::vector<int64_t>> PromptFromText(
    const inference::ModelInferRequest& request, int index,
    const text::Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kTextInputTensor,
                     "': the model folder has no tokenizer; send input_ids"));
  }
  absl::StatusOr<std::string> text = StringOfInput(request, index);
  if (!text.ok()) return text.status();
  return Encode(*tokenizer, *text, /*add_special_tokens=*/true,
                kTextInputTensor);
}

// The rendered chat template's tokens; the template writes the special
// tokens it wants (bos_token), so none are added.
absl::StatusOr<std::vector<int64_t>> PromptFromMessages(
    const inference::ModelInferRequest& request, int index,
    const GenerationLimits& limits) {
  if (limits.chat == nullptr || limits.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kMessagesTensor,
                     "': the model folder has no chat template "
                     "(chat_template.jinja or tokenizer_config.json's "
                     "chat_template) and tokenizer"));
  }
  absl::StatusOr<std::string> messages = StringOfInput(request, index);
  if (!messages.ok()) return messages.status();
  absl::StatusOr<std::string> prompt = limits.chat->Render(*messages);
  if (!prompt.ok()) return prompt.status();
  return Encode(*limits.tokenizer, *prompt, /*add_special_tokens=*/false,
                kMessagesTensor);
}

// The prompt of `request`: input_ids, or text_input encoded.
absl::StatusOr<std::vector<int64_t>> Prompt(
    const inference::ModelInferRequest& request,
    const GenerationLimits& limits) {
  int text_index = -1;
  int ids_index = -1;
  int messages_index = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    if (name == kTextInputTensor && text_index < 0) {
      text_index = i;
    } else if (name == kMessagesTensor && messages_index < 0 &&
               limits.chat != nullptr) {
      messages_index = i;
    } else if (name == kInputIdsTensor && ids_index < 0) {
      ids_index = i;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", platform::SanitizeText(name, 64),
          "' is not an input of the model (",
          absl::StrJoin(*limits.inputs, ", ",
                        [](std::string* out, const TensorSpec& spec) {
                          absl::StrAppend(out, spec.name);
                        }),
          "), or is given twice"));
    }
  }
  if ((text_index >= 0) + (ids_index >= 0) + (messages_index >= 0) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a generation request gives exactly one of '", kTextInputTensor, "', ",
        limits.chat != nullptr ? absl::StrCat("'", kMessagesTensor, "', ") : "",
        "'", kInputIdsTensor, "'"));
  }
  if (messages_index >= 0) {
    return PromptFromMessages(request, messages_index, limits);
  }
  if (text_index >= 0) {
    return PromptFromText(request, text_index, limits.tokenizer);
  }
  static const std::vector<models::TensorSpec> kIdsSpec = {
      {kInputIdsTensor, at::kLong, {-1}, false}};
  absl::StatusOr<models::NamedTensors> tensors =
      InputsFromRequest(request, kIdsSpec, /*max_batch_size=*/0);
  if (!tensors.ok()) return tensors.status();
  const at::Tensor& ids = tensors->at(kInputIdsTensor);
  const int64_t* data = ids.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + ids.numel());
}

// InvalidArgument for a requested log-probability output that the
// parameters do not ask for (logprobs; top_logprobs > 0 for the top ones).
absl::Status CheckLogprobOutputs(const std::vector<std::string>& requested,
                                 const models::SamplingParams& sampling) {
  for (const std::string& name : requested) {
    const bool top = name == kOutputTopIdsTensor ||
                     name == kOutputTopLogprobsTensor ||
                     name == kOutputTopTokensTensor;
    const bool chosen =
        name == kOutputLogprobsTensor || name == kOutputTokensTensor;
    if ((chosen || top) && !sampling.logprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("requested output '", name,
                       "' needs the parameter 'logprobs' set to true"));
    }
    if (top && sampling.top_logprobs == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("requested output '", name,
                       "' needs the parameter 'top_logprobs' above 0"));
    }
  }
  return absl::OkStatus();
}

// The request's prompt with the options its parameters give over the
// model's defaults, checked by the one check of a generation request
// (models::CheckGenerationRequest).
absl::StatusOr<models::CheckedGeneration> CheckedGenerationFor(
    std::vector<int64_t> prompt, const GenerationParameters& parameters,
    const GenerationLimits& limits) {
  if (!parameters.stop.empty() && limits.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        "parameter 'stop' needs text; the model folder has no tokenizer (use "
        "stop_token_ids)");
  }
  models::GenerationOptions options;
  options.max_new_tokens =
      parameters.max_tokens.value_or(limits.default_max_tokens);
  if (!parameters.ignore_eos) options.eos_token_ids = limits.eos_token_ids;
  options.stop_token_ids = parameters.stop_token_ids;
  options.sampling = parameters.sampling;
  return models::CheckGenerationRequest(limits.vocab_size, limits.max_positions,
                                        std::move(prompt), std::move(options));
}

}  // namespace

absl::StatusOr<CheckedGenerationRequest> DecodeGenerationRequest(
    const inference::ModelInferRequest& request,
    const GenerationLimits& limits) {
  absl::StatusOr<std::vector<std::string>> requested =
      RequestedOutputs(request, *limits.outputs);
  if (!requested.ok()) return requested.status();
  absl::StatusOr<GenerationParameters> parameters =
      ParseGenerationParameters(request.parameters());
  if (!parameters.ok()) return parameters.status();
  if (absl::Status outputs =
          CheckLogprobOutputs(*requested, parameters->sampling);
      !outputs.ok()) {
    return outputs;
  }
  absl::StatusOr<std::vector<int64_t>> prompt = Prompt(request, limits);
  if (!prompt.ok()) return prompt.status();
  absl::StatusOr<models::CheckedGeneration> generation =
      CheckedGenerationFor(*std::move(prompt), *parameters, limits);
  if (!generation.ok()) return generation.status();
  return CheckedGenerationRequest{*std::move(requested), *std::move(parameters),
                                  *std::move(generation)};
}

}  // namespace castserve
