#include "server/servables/factory/model_signature.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/servables/proto_dtypes.h"

namespace castserve {
namespace {

// Dims as a config lists them: without the batch dimension when batched.
absl::StatusOr<std::vector<int64_t>> ConfigDims(const models::TensorSpec& spec,
                                                bool batched) {
  if (!batched) return spec.shape;
  if (spec.shape.empty()) {
    return absl::InternalError(
        absl::StrCat("tensor ", spec.name, " has no batch dimension"));
  }
  return std::vector<int64_t>(spec.shape.begin() + 1, spec.shape.end());
}

absl::StatusOr<inference::DataType> ConfigDataTypeOf(
    const models::TensorSpec& spec) {
  const inference::DataType type = ConfigDataType(spec.dtype);
  if (type == inference::TYPE_INVALID) {
    return absl::InternalError(
        absl::StrCat("tensor ", spec.name, " has a dtype with no config type"));
  }
  return type;
}

const models::TensorSpec* FindSpec(const std::vector<models::TensorSpec>& specs,
                                   const std::string& name) {
  for (const models::TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string SpecNames(const std::vector<models::TensorSpec>& specs) {
  return absl::StrJoin(specs, ", ",
                       [](std::string* out, const models::TensorSpec& spec) {
                         absl::StrAppend(out, spec.name);
                       });
}

// Checks one configured tensor (`kind` "input" or "output") against the
// signature.
absl::Status CheckConfiguredTensor(
    absl::string_view kind, const std::string& name,
    inference::DataType data_type,
    const google::protobuf::RepeatedField<int64_t>& dims,
    const std::vector<models::TensorSpec>& specs, bool batched) {
  const models::TensorSpec* spec = FindSpec(specs, name);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", kind, " ", name, " is not an ", kind,
                     " of the model (", SpecNames(specs), ")"));
  }
  absl::StatusOr<inference::DataType> expected_type = ConfigDataTypeOf(*spec);
  if (!expected_type.ok()) return expected_type.status();
  if (data_type != *expected_type) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", kind, " ", name, " has data_type ",
                     inference::DataType_Name(data_type), "; the model's is ",
                     inference::DataType_Name(*expected_type)));
  }
  absl::StatusOr<std::vector<int64_t>> expected = ConfigDims(*spec, batched);
  if (!expected.ok()) return expected.status();
  bool match = dims.size() == static_cast<int>(expected->size());
  for (int i = 0; match && i < dims.size(); ++i) {
    match = (*expected)[i] == -1 ? dims[i] == -1 || dims[i] > 0
                                 : dims[i] == (*expected)[i];
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", kind, " ", name, " has dims [", absl::StrJoin(dims, ","),
        "]; the model's are [", absl::StrJoin(*expected, ","), "]",
        batched ? " (without the batch dimension)" : ""));
  }
  return absl::OkStatus();
}

// Name, data type and dims of a config input or output, from `spec`.
template <typename ConfigTensor>
absl::StatusOr<ConfigTensor> ConfigTensorOf(const models::TensorSpec& spec,
                                            bool batched) {
  absl::StatusOr<inference::DataType> type = ConfigDataTypeOf(spec);
  if (!type.ok()) return type.status();
  absl::StatusOr<std::vector<int64_t>> dims = ConfigDims(spec, batched);
  if (!dims.ok()) return dims.status();
  ConfigTensor tensor;
  tensor.set_name(spec.name);
  tensor.set_data_type(*type);
  tensor.mutable_dims()->Add(dims->begin(), dims->end());
  return tensor;
}

absl::Status FillInputs(const std::vector<models::TensorSpec>& specs,
                        inference::ModelConfig* config) {
  const bool batched = config->max_batch_size() > 0;
  for (const models::TensorSpec& spec : specs) {
    absl::StatusOr<inference::ModelInput> input =
        ConfigTensorOf<inference::ModelInput>(spec, batched);
    if (!input.ok()) return input.status();
    input->set_optional(spec.optional);
    *config->add_input() = *std::move(input);
  }
  return absl::OkStatus();
}

absl::Status FillOutputs(const std::vector<models::TensorSpec>& specs,
                         inference::ModelConfig* config) {
  const bool batched = config->max_batch_size() > 0;
  for (const models::TensorSpec& spec : specs) {
    absl::StatusOr<inference::ModelOutput> output =
        ConfigTensorOf<inference::ModelOutput>(spec, batched);
    if (!output.ok()) return output.status();
    *config->add_output() = *std::move(output);
  }
  return absl::OkStatus();
}

absl::Status CheckConfiguredSignature(
    const std::vector<models::TensorSpec>& inputs,
    const std::vector<models::TensorSpec>& outputs,
    const inference::ModelConfig& config) {
  const bool batched = config.max_batch_size() > 0;
  for (const inference::ModelInput& input : config.input()) {
    if (input.name() == kTextInputName || input.name() == kQueryInputName ||
        input.name() == kDocumentInputName) {
      continue;  // ApplyTextSignature's.
    }
    absl::Status valid =
        CheckConfiguredTensor("input", input.name(), input.data_type(),
                              input.dims(), inputs, batched);
    if (!valid.ok()) return valid;
  }
  for (const models::TensorSpec& spec : inputs) {
    if (config.input_size() == 0) break;  // Filled in from the signature.
    const bool listed =
        std::any_of(config.input().begin(), config.input().end(),
                    [&](const inference::ModelInput& input) {
                      return input.name() == spec.name;
                    });
    if (!listed && !spec.optional) {
      return absl::InvalidArgumentError(
          absl::StrCat("config lacks the model's required input ", spec.name));
    }
  }
  for (const inference::ModelOutput& output : config.output()) {
    absl::Status valid =
        CheckConfiguredTensor("output", output.name(), output.data_type(),
                              output.dims(), outputs, batched);
    if (!valid.ok()) return valid;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplySignature(const std::vector<models::TensorSpec>& inputs,
                            const std::vector<models::TensorSpec>& outputs,
                            inference::ModelConfig* config) {
  absl::Status valid = CheckConfiguredSignature(inputs, outputs, *config);
  if (valid.ok() && config->input_size() == 0) {
    valid = FillInputs(inputs, config);
  }
  if (valid.ok() && config->output_size() == 0) {
    valid = FillOutputs(outputs, config);
  }
  return valid;
}

namespace {

// The string input `name` in `config`: added when `available` and not
// listed; a listed one must be TYPE_STRING with `dims` and available.
absl::Status ApplyStringInput(const std::string& name, bool available,
                              const std::string& unavailable_reason,
                              const std::vector<int64_t>& dims,
                              inference::ModelConfig* config) {
  for (const inference::ModelInput& input : config->input()) {
    if (input.name() != name) continue;
    if (!available) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config lists input ", name, ", but ", unavailable_reason));
    }
    if (input.data_type() != inference::TYPE_STRING ||
        !std::equal(input.dims().begin(), input.dims().end(), dims.begin(),
                    dims.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config input ", name, " must be TYPE_STRING with dims [",
          absl::StrJoin(dims, ","), "] (one string per batch element)"));
    }
    return absl::OkStatus();
  }
  if (!available) return absl::OkStatus();
  inference::ModelInput* added = config->add_input();
  added->set_name(name);
  added->set_data_type(inference::TYPE_STRING);
  added->mutable_dims()->Add(dims.begin(), dims.end());
  added->set_optional(true);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyTextSignature(const TextInput& text,
                                inference::ModelConfig* config) {
  const std::vector<int64_t> dims = config->max_batch_size() > 0
                                        ? std::vector<int64_t>{1}
                                        : std::vector<int64_t>{-1, 1};
  absl::Status status =
      ApplyStringInput(kTextInputName, text.available(),
                       text.unavailable_reason(), dims, config);
  const std::string not_pairs =
      text.available() ? "the model is not a cross-encoder with a pair "
                         "template (model_signature.h)"
                       : text.unavailable_reason();
  for (const char* name : {kQueryInputName, kDocumentInputName}) {
    if (status.ok()) {
      status = ApplyStringInput(name, text.pairs(), not_pairs, dims, config);
    }
  }
  return status;
}

}  // namespace castserve
