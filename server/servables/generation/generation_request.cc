#include "server/servables/generation/generation_request.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
          "requested output '", output.name().substr(0, 64),
          "' is not an output of the model or is requested twice"));
    }
    names.push_back(output.name());
  }
  return names;
}

absl::StatusOr<std::vector<int64_t>> PromptFromText(
    const inference::ModelInferRequest& request, int index,
    const text::Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kTextInputTensor,
                     "': the model folder has no tokenizer; send input_ids"));
  }
  absl::StatusOr<std::vector<std::string>> strings =
      StringsOfInput(request, index, /*max_batch_size=*/1);
  if (!strings.ok()) return strings.status();
  if (!text::IsValidUtf8(strings->front())) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kTextInputTensor, "' is not valid UTF-8"));
  }
  absl::StatusOr<text::Encoding> encoding =
      tokenizer->Encode(strings->front(), text::EncodeOptions{});
  if (!encoding.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", kTextInputTensor, "': ", encoding.status().message()));
  }
  return std::move(encoding->ids);
}

// The prompt of `request`: input_ids, or text_input encoded.
absl::StatusOr<std::vector<int64_t>> Prompt(
    const inference::ModelInferRequest& request,
    const GenerationLimits& limits) {
  int text_index = -1;
  int ids_index = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    if (name == kTextInputTensor && text_index < 0) {
      text_index = i;
    } else if (name == kInputIdsTensor && ids_index < 0) {
      ids_index = i;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", name.substr(0, 64), "' is not an input of the model (",
          absl::StrJoin(*limits.inputs, ", ",
                        [](std::string* out, const TensorSpec& spec) {
                          absl::StrAppend(out, spec.name);
                        }),
          "), or is given twice"));
    }
  }
  if ((text_index < 0) == (ids_index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a generation request gives exactly one of '",
                     kTextInputTensor, "' and '", kInputIdsTensor, "'"));
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

// The sequence's options for `prompt`: the request's parameters over the
// model's defaults, checked with the prompt by the one check of a generation
// request (models::CheckGenerationRequest).
absl::StatusOr<models::GenerationOptions> OptionsFor(
    const std::vector<int64_t>& prompt, const GenerationParameters& parameters,
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
  if (absl::Status checked = models::CheckGenerationRequest(
          limits.vocab_size, limits.max_positions, prompt, options);
      !checked.ok()) {
    return checked;
  }
  return options;
}

}  // namespace

absl::StatusOr<CheckedGenerationRequest> DecodeGenerationRequest(
    const inference::ModelInferRequest& request,
    const GenerationLimits& limits) {
  CheckedGenerationRequest checked;
  absl::StatusOr<std::vector<std::string>> requested =
      RequestedOutputs(request, *limits.outputs);
  if (!requested.ok()) return requested.status();
  checked.requested_outputs = *std::move(requested);
  absl::StatusOr<GenerationParameters> parameters =
      ParseGenerationParameters(request.parameters());
  if (!parameters.ok()) return parameters.status();
  checked.parameters = *std::move(parameters);
  absl::StatusOr<std::vector<int64_t>> prompt = Prompt(request, limits);
  if (!prompt.ok()) return prompt.status();
  checked.prompt = *std::move(prompt);
  absl::StatusOr<models::GenerationOptions> options =
      OptionsFor(checked.prompt, checked.parameters, limits);
  if (!options.ok()) return options.status();
  checked.options = *std::move(options);
  return checked;
}

}  // namespace castserve
