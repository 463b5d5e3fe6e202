#include "client/generate_io.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "platform/length_prefixed.h"

namespace castserve {
namespace {

constexpr char kTextInput[] = "text_input";
constexpr char kInputIds[] = "input_ids";
constexpr char kTextOutput[] = "text_output";
constexpr char kOutputIds[] = "output_ids";

inference::InferParameter ParameterOf(const std::string& value) {
  inference::InferParameter parameter;
  int64_t integer = 0;
  double number = 0;
  if (value == "true" || value == "false") {
    parameter.set_bool_param(value == "true");
  } else if (absl::SimpleAtoi(value, &integer)) {
    parameter.set_int64_param(integer);
  } else if (absl::SimpleAtod(value, &number)) {
    parameter.set_double_param(number);
  } else {
    parameter.set_string_param(value);
  }
  return parameter;
}

// The elements of BYTES raw contents (4-byte little-endian length, bytes).
absl::StatusOr<std::vector<std::string>> BytesElements(absl::string_view raw) {
  std::optional<std::vector<std::string>> elements =
      platform::SplitLengthPrefixed(raw);
  if (!elements.has_value()) {
    return absl::InternalError("BYTES contents are not length-prefixed");
  }
  return *std::move(elements);
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseIds(const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view element : absl::StrSplit(text, ',')) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(element, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ids: '", element, "' is not an integer"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<inference::ModelInferRequest> BuildGenerateRequest(
    const GenerateArgs& args) {
  if (args.text.has_value() == args.ids.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --text and --ids");
  }
  inference::ModelInferRequest request;
  request.set_model_name(args.model);
  auto* input = request.add_inputs();
  std::string raw;
  if (args.text.has_value()) {
    input->set_name(kTextInput);
    input->set_datatype("BYTES");
    input->add_shape(1);
    const uint32_t length = args.text->size();
    raw.assign(reinterpret_cast<const char*>(&length), 4);
    raw += *args.text;
  } else {
    input->set_name(kInputIds);
    input->set_datatype("INT64");
    input->add_shape(static_cast<int64_t>(args.ids->size()));
    raw.assign(reinterpret_cast<const char*>(args.ids->data()),
               args.ids->size() * sizeof(int64_t));
  }
  request.add_raw_input_contents(std::move(raw));
  for (const std::string& parameter : args.parameters) {
    const size_t eq = parameter.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--param: '", parameter, "' is not KEY=VALUE"));
    }
    (*request.mutable_parameters())[parameter.substr(0, eq)] =
        ParameterOf(parameter.substr(eq + 1));
  }
  return request;
}

absl::StatusOr<GeneratedPiece> ReadGeneratedPiece(
    const inference::ModelInferResponse& response) {
  GeneratedPiece piece;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    const absl::string_view raw =
        i < response.raw_output_contents_size()
            ? absl::string_view(response.raw_output_contents(i))
            : absl::string_view();
    if (output.name() == kTextOutput) {
      absl::StatusOr<std::vector<std::string>> elements = BytesElements(raw);
      if (!elements.ok()) return elements.status();
      piece.text = absl::StrJoin(*elements, "");
    } else if (output.name() == kOutputIds) {
      if (output.datatype() != "INT64" || raw.size() % sizeof(int64_t) != 0) {
        return absl::InternalError(absl::StrCat("output_ids: ", raw.size(),
                                                " bytes of ", output.datatype(),
                                                ", not INT64"));
      }
      piece.ids.resize(raw.size() / sizeof(int64_t));
      std::memcpy(piece.ids.data(), raw.data(), raw.size());
    }
  }
  auto reason = response.parameters().find("finish_reason");
  if (reason != response.parameters().end()) {
    piece.finish_reason = reason->second.string_param();
  }
  return piece;
}

std::string PieceText(const GeneratedPiece& piece, bool continued) {
  if (piece.text.has_value()) return *piece.text;
  if (piece.ids.empty()) return "";
  return absl::StrCat(continued ? " " : "", absl::StrJoin(piece.ids, " "));
}

}  // namespace castserve
