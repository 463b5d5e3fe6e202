#include "server/openai/openai_tensors.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "platform/length_prefixed.h"

namespace castserve::openai {
namespace {

const inference::ModelInput* FindInput(const inference::ModelConfig& config,
                                       absl::string_view name) {
  for (const auto& input : config.input()) {
    if (input.name() == name) return &input;
  }
  return nullptr;
}

bool HasOutput(const inference::ModelConfig& config, absl::string_view name,
               inference::DataType type) {
  for (const auto& output : config.output()) {
    if (output.name() == name && output.data_type() == type) return true;
  }
  return false;
}

std::vector<int64_t> Shape(const inference::ModelConfig& config,
                           int64_t elements) {
  if (config.max_batch_size() > 0) return {1, elements};
  return {elements};
}

void AddInt64Input(const inference::ModelConfig& config,
                   const std::string& name, const std::vector<int64_t>& values,
                   inference::ModelInferRequest* request) {
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype("INT64");
  for (int64_t dim : Shape(config, static_cast<int64_t>(values.size()))) {
    input->add_shape(dim);
  }
  request->add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(values.data()),
                  values.size() * sizeof(int64_t)));
}

int OutputIndex(const inference::ModelInferResponse& response,
                absl::string_view name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) return i;
  }
  return -1;
}

}  // namespace

bool HasInput(const inference::ModelConfig& config, absl::string_view name) {
  return FindInput(config, name) != nullptr;
}

ModelKind KindOf(const inference::ModelConfig& config) {
  if (config.has_generation()) return ModelKind::kGeneration;
  if (HasInput(config, "query") && HasInput(config, "document") &&
      HasOutput(config, "scores", inference::TYPE_FP32)) {
    return ModelKind::kReranker;
  }
  if (HasInput(config, "text") &&
      HasOutput(config, "sentence_embedding", inference::TYPE_FP32)) {
    return ModelKind::kEmbedding;
  }
  return ModelKind::kOther;
}

std::string KindName(const inference::ModelConfig& config) {
  switch (KindOf(config)) {
    case ModelKind::kGeneration:
      return "generation";
    case ModelKind::kEmbedding:
      return "sentence embedding";
    case ModelKind::kReranker:
      return "reranker";
    default:
      return config.architecture().empty()
                 ? "tensor"
                 : absl::StrCat("'", config.architecture(), "'");
  }
}

void AddBytesInput(const inference::ModelConfig& config,
                   const std::string& name, absl::string_view value,
                   inference::ModelInferRequest* request) {
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype("BYTES");
  for (int64_t dim : Shape(config, 1)) input->add_shape(dim);
  std::string raw;
  platform::AppendLengthPrefixed(value, &raw);
  request->add_raw_input_contents(std::move(raw));
}

void AddBytesInputs(const inference::ModelConfig& config,
                    const std::string& name,
                    const std::vector<absl::string_view>& values,
                    inference::ModelInferRequest* request) {
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(values.size()));
  input->add_shape(1);
  std::string raw;
  for (absl::string_view value : values)
    platform::AppendLengthPrefixed(value, &raw);
  request->add_raw_input_contents(std::move(raw));
}

void AddTokenInputs(const inference::ModelConfig& config,
                    const std::vector<int64_t>& ids,
                    inference::ModelInferRequest* request) {
  AddInt64Input(config, "input_ids", ids, request);
  const inference::ModelInput* mask = FindInput(config, "attention_mask");
  if (mask != nullptr && !mask->optional()) {
    AddInt64Input(config, "attention_mask", std::vector<int64_t>(ids.size(), 1),
                  request);
  }
  const inference::ModelInput* types = FindInput(config, "token_type_ids");
  if (types != nullptr && !types->optional()) {
    AddInt64Input(config, "token_type_ids", std::vector<int64_t>(ids.size(), 0),
                  request);
  }
}

absl::StatusOr<std::vector<float>> Fp32Output(
    const inference::ModelInferResponse& response, absl::string_view name) {
  const int index = OutputIndex(response, name);
  if (index < 0 || response.outputs(index).datatype() != "FP32") {
    return absl::InternalError(
        absl::StrCat("the model's answer has no FP32 output '", name, "'"));
  }
  if (index < response.raw_output_contents_size()) {
    const std::string& raw = response.raw_output_contents(index);
    if (raw.size() % sizeof(float) != 0) {
      return absl::InternalError(
          absl::StrCat("output '", name, "' has ", raw.size(), " bytes"));
    }
    std::vector<float> values(raw.size() / sizeof(float));
    std::memcpy(values.data(), raw.data(), raw.size());
    return values;
  }
  const auto& contents = response.outputs(index).contents().fp32_contents();
  return std::vector<float>(contents.begin(), contents.end());
}

absl::StatusOr<std::vector<std::string>> BytesOutputs(
    const inference::ModelInferResponse& response, absl::string_view name) {
  const int index = OutputIndex(response, name);
  if (index < 0) return std::vector<std::string>();
  if (index >= response.raw_output_contents_size()) {
    const auto& contents = response.outputs(index).contents().bytes_contents();
    return std::vector<std::string>(contents.begin(), contents.end());
  }
  std::optional<std::vector<std::string>> elements =
      platform::SplitLengthPrefixed(response.raw_output_contents(index));
  if (!elements.has_value()) {
    return absl::InternalError(
        absl::StrCat("output '", name, "' is malformed"));
  }
  return *std::move(elements);
}

absl::StatusOr<std::string> BytesOutput(
    const inference::ModelInferResponse& response, absl::string_view name) {
  absl::StatusOr<std::vector<std::string>> elements =
      BytesOutputs(response, name);
  if (!elements.ok()) return elements.status();
  return elements->empty() ? std::string() : elements->front();
}

int64_t ElementCount(const inference::ModelInferResponse& response,
                     absl::string_view name) {
  const int index = OutputIndex(response, name);
  if (index < 0) return 0;
  int64_t count = 1;
  for (int64_t dim : response.outputs(index).shape()) count *= dim;
  return count;
}

std::optional<int64_t> IntParameter(
    const inference::ModelInferResponse& response, const std::string& name) {
  auto it = response.parameters().find(name);
  if (it == response.parameters().end() ||
      it->second.parameter_choice_case() !=
          inference::InferParameter::kInt64Param) {
    return std::nullopt;
  }
  return it->second.int64_param();
}

std::optional<std::string> StringParameter(
    const inference::ModelInferResponse& response, const std::string& name) {
  auto it = response.parameters().find(name);
  if (it == response.parameters().end() ||
      it->second.parameter_choice_case() !=
          inference::InferParameter::kStringParam) {
    return std::nullopt;
  }
  return it->second.string_param();
}

}  // namespace castserve::openai
