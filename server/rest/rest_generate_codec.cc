#include "server/rest/rest_generate_codec.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/json_parser.h"
#include "server/core/generation_parameter_names.h"
#include "server/rest/rest_infer_codec.h"

namespace castserve {
namespace {

using nlohmann::json;

// A generate body is an object of values, flat arrays and the parameters
// object: the arrays of a parameter's value (stop strings) are as deep as
// it gets.
constexpr int kMaxGenerateJsonDepth = 4;
constexpr char kParameters[] = "parameters";
constexpr char kId[] = "id";
constexpr char kFinishReason[] = "finish_reason";

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

bool IsGenerateParameter(absl::string_view key) {
  return std::find(std::begin(kGenerationParameterNames),
                   std::end(kGenerationParameterNames),
                   key) != std::end(kGenerationParameterNames);
}

const inference::ModelMetadataResponse::TensorMetadata* FindInput(
    const inference::ModelMetadataResponse& metadata, absl::string_view name) {
  for (const auto& input : metadata.inputs()) {
    if (input.name() == name) return &input;
  }
  return nullptr;
}

// A parameter's value as the infer codec takes it: arrays as their text.
absl::StatusOr<json> ParameterValue(const json& value, absl::string_view key) {
  if (value.is_boolean() || value.is_number() || value.is_string()) {
    return value;
  }
  if (value.is_array()) return json(value.dump());
  return Invalid(absl::StrCat("parameter '", key,
                              "' must be a boolean, a number, a string or an "
                              "array, got ",
                              platform::JsonTypeName(value)));
}

absl::Status AddParameter(const std::string& key, const json& value,
                          json& parameters) {
  if (parameters.contains(key)) {
    return Invalid(absl::StrCat("parameter '", key, "' is given twice"));
  }
  absl::StatusOr<json> converted = ParameterValue(value, key);
  if (!converted.ok()) return converted.status();
  parameters[key] = *std::move(converted);
  return absl::OkStatus();
}

// The infer codec's JSON input of `value` for `input`.
absl::StatusOr<json> InputEntry(
    const inference::ModelMetadataResponse::TensorMetadata& input,
    const json& value) {
  json data = value.is_array() ? value : json::array({value});
  for (const json& element : data) {
    if (element.is_array() || element.is_object() || element.is_null()) {
      return Invalid(absl::StrCat("input '", input.name(),
                                  "' must be a value or a flat array of "
                                  "values, not ",
                                  platform::JsonTypeName(value)));
    }
  }
  std::vector<int64_t> shape(std::max(input.shape_size(), 1) - 1, 1);
  shape.push_back(static_cast<int64_t>(data.size()));
  return json{{"name", input.name()},
              {"datatype", input.datatype()},
              {"shape", shape},
              {"data", std::move(data)}};
}

std::string InputNames(const inference::ModelMetadataResponse& metadata) {
  std::vector<std::string> names;
  for (const auto& input : metadata.inputs()) {
    names.push_back(absl::StrCat("'", input.name(), "'"));
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// The KServe infer request (rest_infer_codec.h's JSON) of a generate body.
absl::StatusOr<json> InferJson(
    const json& root, const inference::ModelMetadataResponse& metadata) {
  json infer = {{"inputs", json::array()}, {kParameters, json::object()}};
  for (const auto& [key, value] : root.items()) {
    absl::Status status;
    if (key == kId) {
      if (!value.is_string()) return Invalid("\"id\" must be a string");
      infer[kId] = value;
    } else if (key == kParameters) {
      if (!value.is_object())
        return Invalid("\"parameters\" must be an object");
      for (const auto& [name, parameter] : value.items()) {
        status.Update(AddParameter(name, parameter, infer[kParameters]));
      }
    } else if (const auto* input = FindInput(metadata, key)) {
      absl::StatusOr<json> entry = InputEntry(*input, value);
      if (!entry.ok()) return entry.status();
      infer["inputs"].push_back(*std::move(entry));
    } else if (IsGenerateParameter(key)) {
      status = AddParameter(key, value, infer[kParameters]);
    } else {
      return Invalid(
          absl::StrCat("unknown key '", key, "': not an input of model '",
                       metadata.name(), "' (", InputNames(metadata),
                       "), \"id\", \"parameters\" or a generation parameter (",
                       absl::StrJoin(kGenerationParameterNames, ", "), ")"));
    }
    if (!status.ok()) return status;
  }
  return infer;
}

}  // namespace

absl::StatusOr<inference::ModelInferRequest> DecodeGenerateRequest(
    absl::string_view body, absl::string_view model, absl::string_view version,
    const inference::ModelMetadataResponse& metadata) {
  platform::JsonLimits limits;
  limits.max_depth = kMaxGenerateJsonDepth;
  limits.max_bytes = kMaxRestJsonBytes;
  absl::StatusOr<json> root = platform::ParseJson(body, limits);
  if (!root.ok()) return root.status();
  if (!root->is_object()) {
    return Invalid(absl::StrCat("the body must be a JSON object, got ",
                                platform::JsonTypeName(*root)));
  }
  absl::StatusOr<json> infer = InferJson(*root, metadata);
  if (!infer.ok()) return infer.status();
  absl::StatusOr<RestInferRequest> decoded =
      DecodeRestInferRequest(infer->dump(), std::nullopt, model, version);
  if (!decoded.ok()) return decoded.status();
  return std::move(decoded->request);
}

absl::StatusOr<std::string> EncodeGenerateResponse(
    const inference::ModelInferResponse& response) {
  json root = {{"model_name", response.model_name()},
               {"model_version", response.model_version()}};
  if (!response.id().empty()) root[kId] = response.id();
  for (int i = 0; i < response.outputs_size(); ++i) {
    absl::StatusOr<json> data = RestOutputData(response, i);
    if (!data.ok()) return data.status();
    const auto& output = response.outputs(i);
    root[output.name()] = output.datatype() == "BYTES" && data->size() == 1
                              ? (*data)[0]
                              : *std::move(data);
  }
  auto reason = response.parameters().find(kFinishReason);
  if (reason != response.parameters().end()) {
    root[kFinishReason] = reason->second.string_param();
  }
  // Invalid UTF-8 becomes U+FFFD: JSON text cannot carry it.
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ServerSentEvent(absl::string_view json_text) {
  return absl::StrCat("data: ", json_text, "\n\n");
}

}  // namespace castserve
