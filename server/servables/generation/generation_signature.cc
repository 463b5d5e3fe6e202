#include "server/servables/generation/generation_signature.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace castserve {
namespace {

inference::DataType ConfigTypeOf(const TensorSpec& spec) {
  if (spec.datatype == "BYTES") return inference::TYPE_STRING;
  if (spec.datatype == "FP32") return inference::TYPE_FP32;
  return inference::TYPE_INT64;
}

template <typename ConfigTensors>
absl::Status Apply(const std::vector<TensorSpec>& specs, absl::string_view kind,
                   ConfigTensors* listed) {
  if (listed->empty()) {
    for (const TensorSpec& spec : specs) {
      auto* tensor = listed->Add();
      tensor->set_name(spec.name);
      tensor->set_data_type(ConfigTypeOf(spec));
      tensor->mutable_dims()->Add(spec.shape.begin(), spec.shape.end());
      if constexpr (std::is_same_v<ConfigTensors,
                                   google::protobuf::RepeatedPtrField<
                                       inference::ModelInput>>) {
        tensor->set_optional(spec.optional);
      }
    }
    return absl::OkStatus();
  }
  for (const auto& tensor : *listed) {
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const auto& s) {
      return s.name == tensor.name();
    });
    if (spec == specs.end() || tensor.data_type() != ConfigTypeOf(*spec) ||
        !std::equal(tensor.dims().begin(), tensor.dims().end(),
                    spec->shape.begin(), spec->shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config ", kind, " ", tensor.name(), " is not one of the generation ",
          kind, "s (",
          absl::StrJoin(specs, ", ",
                        [](std::string* out, const TensorSpec& s) {
                          absl::StrAppend(out, s.name, " ", s.datatype, " [",
                                          absl::StrJoin(s.shape, ","), "]");
                        }),
          ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

GenerationSignature GenerationSignatureOf(bool text, bool chat) {
  GenerationSignature signature;
  if (text) {
    signature.inputs.push_back({kTextInputTensor, "BYTES", {1}, true});
    if (chat) signature.inputs.push_back({kMessagesTensor, "BYTES", {1}, true});
    signature.outputs.push_back({kTextOutputTensor, "BYTES", {1}, false});
  }
  signature.inputs.push_back({kInputIdsTensor, "INT64", {-1}, true});
  signature.outputs.push_back({kOutputIdsTensor, "INT64", {-1}, false});
  signature.outputs.push_back({kOutputLogprobsTensor, "FP32", {-1}, false});
  signature.outputs.push_back({kOutputTopIdsTensor, "INT64", {-1, -1}, false});
  signature.outputs.push_back(
      {kOutputTopLogprobsTensor, "FP32", {-1, -1}, false});
  if (text) {
    signature.outputs.push_back({kOutputTokensTensor, "BYTES", {-1}, false});
    signature.outputs.push_back(
        {kOutputTopTokensTensor, "BYTES", {-1, -1}, false});
  }
  return signature;
}

absl::Status ApplyGenerationSignature(const GenerationSignature& signature,
                                      inference::ModelConfig& config) {
  absl::Status valid = Apply(signature.inputs, "input", config.mutable_input());
  if (!valid.ok()) return valid;
  return Apply(signature.outputs, "output", config.mutable_output());
}

}  // namespace castserve
