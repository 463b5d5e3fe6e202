#include "server/rest/rest_infer_codec.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/codec/codec.h"
#include "casting/codec/dtype_table.h"
#include "platform/json_parser.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "binary tensors are little-endian; so must the host be");

namespace castserve {
namespace {

using nlohmann::json;
using InputTensor = inference::ModelInferRequest::InferInputTensor;

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::Status ExpectType(const json& value, json::value_t type,
                        absl::string_view where, absl::string_view expected) {
  if (value.type() == type) return absl::OkStatus();
  return Invalid(where, absl::StrCat("must be ", expected, ", got ",
                                     platform::JsonTypeName(value)));
}

bool IsUnsigned(casting::DType dtype) {
  return dtype == casting::DType::kU8 || dtype == casting::DType::kU16 ||
         dtype == casting::DType::kU32 || dtype == casting::DType::kU64;
}

void AppendLittleEndian(uint64_t bits, int bytes, std::string* raw) {
  char buffer[8];
  std::memcpy(buffer, &bits, sizeof bits);
  raw->append(buffer, bytes);
}

// One integer element, checked against the type's range.
absl::Status AppendInteger(const json& value, const casting::DtypeRow& row,
                           absl::string_view where, std::string* raw) {
  const bool is_unsigned = IsUnsigned(row.dtype);
  const int bits = row.bits;
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    const uint64_t max =
        bits == 64
            ? (is_unsigned ? std::numeric_limits<uint64_t>::max()
                           : uint64_t{std::numeric_limits<int64_t>::max()})
            : (uint64_t{1} << (is_unsigned ? bits : bits - 1)) - 1;
    if (number > max) {
      return Invalid(
          where, absl::StrCat(number, " is out of range for ", row.wire_name));
    }
    AppendLittleEndian(number, bits / 8, raw);
    return absl::OkStatus();
  }
  const int64_t number = value.get<int64_t>();
  const int64_t min = is_unsigned
                          ? 0
                          : (bits == 64 ? std::numeric_limits<int64_t>::min()
                                        : -(int64_t{1} << (bits - 1)));
  if (number < min) {
    return Invalid(
        where, absl::StrCat(number, " is out of range for ", row.wire_name));
  }
  AppendLittleEndian(static_cast<uint64_t>(number), bits / 8, raw);
  return absl::OkStatus();
}

void AppendFloat(double number, const casting::DtypeRow& row,
                 std::string* raw) {
  if (row.bits == 64) {
    uint64_t bits;
    std::memcpy(&bits, &number, sizeof bits);
    AppendLittleEndian(bits, 8, raw);
  } else if (row.bits == 32) {
    const float single = static_cast<float>(number);
    uint32_t bits;
    std::memcpy(&bits, &single, sizeof bits);
    AppendLittleEndian(bits, 4, raw);
  } else {  // FP16, BF16: the codec's rounding.
    AppendLittleEndian(
        casting::F32ToElementBits(*row.element, static_cast<float>(number)),
        row.bits / 8, raw);
  }
}

// One element of JSON data in the datatype's raw form.
absl::Status AppendElement(const json& value, const casting::DtypeRow& row,
                           absl::string_view where, std::string* raw) {
  switch (row.kind) {
    case casting::DtypeKind::kBool:
      if (!value.is_boolean()) break;
      raw->push_back(value.get<bool>() ? 1 : 0);
      return absl::OkStatus();
    case casting::DtypeKind::kInteger:
      if (!value.is_number_integer()) break;
      return AppendInteger(value, row, where, raw);
    case casting::DtypeKind::kFloat:
      if (!value.is_number()) break;
      AppendFloat(value.get<double>(), row, raw);
      return absl::OkStatus();
    case casting::DtypeKind::kBytes: {
      if (!value.is_string()) break;
      const std::string& text = value.get_ref<const std::string&>();
      AppendLittleEndian(text.size(), 4, raw);
      raw->append(text);
      return absl::OkStatus();
    }
    case casting::DtypeKind::kComplex:
      break;
  }
  const char* expected = row.kind == casting::DtypeKind::kBool      ? "booleans"
                         : row.kind == casting::DtypeKind::kInteger ? "integers"
                         : row.kind == casting::DtypeKind::kBytes   ? "strings"
                                                                    : "numbers";
  return Invalid(where, absl::StrCat(row.wire_name, " data must be ", expected,
                                     ", got ", platform::JsonTypeName(value)));
}

// The elements of `data`, flat or nested (row-major), appended to `raw`.
// Nesting is bounded by the parser's depth limit.
absl::Status AppendData(const json& data, const casting::DtypeRow& row,
                        absl::string_view where, std::string* raw) {
  if (!data.is_array()) return AppendElement(data, row, where, raw);
  for (const json& element : data) {
    if (absl::Status status = AppendData(element, row, where, raw);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<inference::InferParameter> InferParameterFrom(
    const json& value, absl::string_view where) {
  inference::InferParameter parameter;
  if (value.is_boolean()) {
    parameter.set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number <= uint64_t{std::numeric_limits<int64_t>::max()}) {
      parameter.set_int64_param(static_cast<int64_t>(number));
    } else {
      parameter.set_uint64_param(number);
    }
  } else if (value.is_number_integer()) {
    parameter.set_int64_param(value.get<int64_t>());
  } else if (value.is_number_float()) {
    parameter.set_double_param(value.get<double>());
  } else if (value.is_string()) {
    parameter.set_string_param(value.get<std::string>());
  } else {
    return Invalid(where, absl::StrCat("must be a boolean, number or string, "
                                       "got ",
                                       platform::JsonTypeName(value)));
  }
  return parameter;
}

// The parameters object at `value` into `out`, less the keys `consume`
// takes (it returns true for those it took).
template <typename Consume>
absl::Status DecodeParameters(
    const json& value, absl::string_view where,
    google::protobuf::Map<std::string, inference::InferParameter>* out,
    Consume consume) {
  if (absl::Status status =
          ExpectType(value, json::value_t::object, where, "an object");
      !status.ok()) {
    return status;
  }
  for (const auto& [key, item] : value.items()) {
    const std::string item_where = absl::StrCat(where, ".", key);
    absl::StatusOr<bool> consumed = consume(key, item, item_where);
    if (!consumed.ok()) return consumed.status();
    if (*consumed) continue;
    absl::StatusOr<inference::InferParameter> parameter =
        InferParameterFrom(item, item_where);
    if (!parameter.ok()) return parameter.status();
    (*out)[key] = *std::move(parameter);
  }
  return absl::OkStatus();
}

// The slices of the binary section the inputs claim, in input order.
class BinarySection {
 public:
  explicit BinarySection(absl::string_view bytes) : bytes_(bytes) {}

  absl::StatusOr<absl::string_view> Take(uint64_t size,
                                         absl::string_view where) {
    if (size > bytes_.size() - offset_) {
      return Invalid(
          where,
          absl::StrCat("binary_data_size ", size, " runs past the body's ",
                       bytes_.size() - offset_, " remaining binary bytes"));
    }
    absl::string_view slice = bytes_.substr(offset_, size);
    offset_ += size;
    return slice;
  }

  absl::Status CheckAllTaken() const {
    if (offset_ == bytes_.size()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the body has ", bytes_.size() - offset_,
                     " binary bytes that no input's binary_data_size claims"));
  }

 private:
  const absl::string_view bytes_;
  size_t offset_ = 0;
};

absl::Status DecodeShape(const json& value, absl::string_view where,
                         InputTensor* input) {
  if (absl::Status status =
          ExpectType(value, json::value_t::array, where, "an array");
      !status.ok()) {
    return status;
  }
  for (const json& dim : value) {
    if (!dim.is_number_integer()) {
      return Invalid(where, absl::StrCat("dimensions must be integers, got ",
                                         platform::JsonTypeName(dim)));
    }
    if (dim.is_number_unsigned() &&
        dim.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return Invalid(where, "a dimension is out of range");
    }
    input->add_shape(dim.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status DecodeInput(const json& value, size_t index, BinarySection& binary,
                         InputTensor* input, std::string* raw) {
  std::string where = absl::StrCat("inputs[", index, "]");
  if (absl::Status status =
          ExpectType(value, json::value_t::object, where, "an object");
      !status.ok()) {
    return status;
  }
  for (const char* key : {"name", "datatype"}) {
    auto field = value.find(key);
    if (field == value.end() || !field->is_string()) {
      return Invalid(where, absl::StrCat("needs \"", key, "\" (a string)"));
    }
    const std::string& text = field->get_ref<const std::string&>();
    *(std::string(key) == "name" ? input->mutable_name()
                                 : input->mutable_datatype()) = text;
  }
  where = absl::StrCat("input '", input->name(), "'");
  auto shape = value.find("shape");
  if (shape == value.end()) return Invalid(where, "needs \"shape\"");
  if (absl::Status status = DecodeShape(*shape, where + ".shape", input);
      !status.ok()) {
    return status;
  }
  std::optional<uint64_t> binary_size;
  if (auto parameters = value.find("parameters"); parameters != value.end()) {
    absl::Status status = DecodeParameters(
        *parameters, where + ".parameters", input->mutable_parameters(),
        [&binary_size](const std::string& key, const json& item,
                       const std::string& item_where) -> absl::StatusOr<bool> {
          if (key != "binary_data_size") return false;
          if (!item.is_number_unsigned()) {
            return Invalid(item_where, "must be a non-negative integer");
          }
          binary_size = item.get<uint64_t>();
          return true;
        });
    if (!status.ok()) return status;
  }
  auto data = value.find("data");
  if (binary_size.has_value()) {
    if (data != value.end()) {
      return Invalid(where, "has both \"data\" and binary_data_size");
    }
    absl::StatusOr<absl::string_view> bytes = binary.Take(*binary_size, where);
    if (!bytes.ok()) return bytes.status();
    raw->assign(bytes->data(), bytes->size());
    return absl::OkStatus();
  }
  if (data == value.end()) {
    return Invalid(where, "needs \"data\" or a binary_data_size parameter");
  }
  absl::StatusOr<const casting::DtypeRow*> row =
      casting::FindByWireName(input->datatype());
  if (!row.ok()) return Invalid(where, row.status().message());
  return AppendData(*data, **row, where + ".data", raw);
}

absl::Status DecodeOutput(const json& value, size_t index,
                          inference::ModelInferRequest* request,
                          RestOutputFormat* format) {
  const std::string where = absl::StrCat("outputs[", index, "]");
  if (absl::Status status =
          ExpectType(value, json::value_t::object, where, "an object");
      !status.ok()) {
    return status;
  }
  auto name = value.find("name");
  if (name == value.end() || !name->is_string()) {
    return Invalid(where, "needs \"name\" (a string)");
  }
  auto* output = request->add_outputs();
  output->set_name(name->get<std::string>());
  auto parameters = value.find("parameters");
  if (parameters == value.end()) return absl::OkStatus();
  return DecodeParameters(
      *parameters, where + ".parameters", output->mutable_parameters(),
      [format, output](const std::string& key, const json& item,
                       const std::string& item_where) -> absl::StatusOr<bool> {
        if (key == "binary_data") {
          if (!item.is_boolean())
            return Invalid(item_where, "must be a boolean");
          format->binary[output->name()] = item.get<bool>();
          return true;
        }
        if (key == "classification") {
          return Invalid(item_where,
                         "castserve does not implement the classification "
                         "extension");
        }
        return false;
      });
}

absl::Status DecodeRoot(const json& root, absl::string_view binary,
                        RestInferRequest* decoded) {
  inference::ModelInferRequest& request = decoded->request;
  if (absl::Status status =
          ExpectType(root, json::value_t::object, "the request", "an object");
      !status.ok()) {
    return status;
  }
  if (auto id = root.find("id"); id != root.end()) {
    if (!id->is_string()) return Invalid("id", "must be a string");
    request.set_id(id->get<std::string>());
  }
  if (auto parameters = root.find("parameters"); parameters != root.end()) {
    absl::Status status = DecodeParameters(
        *parameters, "parameters", request.mutable_parameters(),
        [decoded](const std::string& key, const json& item,
                  const std::string& where) -> absl::StatusOr<bool> {
          if (key != "binary_data_output") return false;
          if (!item.is_boolean()) return Invalid(where, "must be a boolean");
          decoded->output_format.binary_by_default = item.get<bool>();
          return true;
        });
    if (!status.ok()) return status;
  }
  auto inputs = root.find("inputs");
  if (inputs == root.end() || !inputs->is_array()) {
    return absl::InvalidArgumentError(
        "the request needs \"inputs\" (an array)");
  }
  BinarySection section(binary);
  for (size_t i = 0; i < inputs->size(); ++i) {
    absl::Status status =
        DecodeInput((*inputs)[i], i, section, request.add_inputs(),
                    request.add_raw_input_contents());
    if (!status.ok()) return status;
  }
  if (absl::Status status = section.CheckAllTaken(); !status.ok()) {
    return status;
  }
  auto outputs = root.find("outputs");
  if (outputs == root.end()) return absl::OkStatus();
  if (!outputs->is_array()) return Invalid("outputs", "must be an array");
  for (size_t i = 0; i < outputs->size(); ++i) {
    if (absl::Status status =
            DecodeOutput((*outputs)[i], i, &request, &decoded->output_format);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

// --- Response ---------------------------------------------------------------

template <typename T>
T ReadLittleEndian(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

json IntegerElement(const char* bytes, const casting::DtypeRow& row) {
  const bool is_unsigned = IsUnsigned(row.dtype);
  switch (row.bits) {
    case 8:
      return is_unsigned ? json(ReadLittleEndian<uint8_t>(bytes))
                         : json(ReadLittleEndian<int8_t>(bytes));
    case 16:
      return is_unsigned ? json(ReadLittleEndian<uint16_t>(bytes))
                         : json(ReadLittleEndian<int16_t>(bytes));
    case 32:
      return is_unsigned ? json(ReadLittleEndian<uint32_t>(bytes))
                         : json(ReadLittleEndian<int32_t>(bytes));
    default:
      return is_unsigned ? json(ReadLittleEndian<uint64_t>(bytes))
                         : json(ReadLittleEndian<int64_t>(bytes));
  }
}

json FloatElement(const char* bytes, const casting::DtypeRow& row) {
  if (row.bits == 64) return ReadLittleEndian<double>(bytes);
  if (row.bits == 32) return ReadLittleEndian<float>(bytes);
  return casting::ElementBitsToF32(*row.element,
                                   ReadLittleEndian<uint16_t>(bytes));
}

// BYTES raw contents: each element a 4-byte little-endian length and the
// bytes.
absl::StatusOr<json> BytesElements(absl::string_view raw,
                                   absl::string_view name) {
  json elements = json::array();
  while (!raw.empty()) {
    if (raw.size() < 4) break;
    const uint32_t length = ReadLittleEndian<uint32_t>(raw.data());
    raw.remove_prefix(4);
    if (length > raw.size()) break;
    elements.push_back(std::string(raw.substr(0, length)));
    raw.remove_prefix(length);
  }
  if (!raw.empty()) {
    return absl::InternalError(absl::StrCat(
        "output '", name, "': BYTES contents are not length-prefixed"));
  }
  return elements;
}

// An output's raw contents as a flat JSON array.
absl::StatusOr<json> DataOf(
    const inference::ModelInferResponse::InferOutputTensor& output,
    absl::string_view raw) {
  absl::StatusOr<const casting::DtypeRow*> found =
      casting::FindByWireName(output.datatype());
  if (!found.ok()) return absl::InternalError(found.status().message());
  const casting::DtypeRow& row = **found;
  if (row.kind == casting::DtypeKind::kBytes) {
    return BytesElements(raw, output.name());
  }
  const size_t size = row.bits / 8;
  if (size == 0 || raw.size() % size != 0) {
    return absl::InternalError(absl::StrCat("output '", output.name(),
                                            "': ", raw.size(), " bytes of ",
                                            output.datatype()));
  }
  json elements = json::array();
  for (size_t offset = 0; offset < raw.size(); offset += size) {
    const char* bytes = raw.data() + offset;
    switch (row.kind) {
      case casting::DtypeKind::kBool:
        elements.push_back(*bytes != 0);
        break;
      case casting::DtypeKind::kInteger:
        elements.push_back(IntegerElement(bytes, row));
        break;
      default:
        elements.push_back(FloatElement(bytes, row));
        break;
    }
  }
  return elements;
}

}  // namespace

bool RestOutputFormat::IsBinary(const std::string& output) const {
  auto it = binary.find(output);
  return it != binary.end() ? it->second : binary_by_default;
}

absl::StatusOr<RestInferRequest> DecodeRestInferRequest(
    absl::string_view body, std::optional<uint64_t> header_length,
    absl::string_view model, absl::string_view version) {
  if (header_length.has_value() && *header_length > body.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length is ", *header_length,
                     " but the body has only ", body.size(), " bytes"));
  }
  const size_t json_bytes = header_length.value_or(body.size());
  if (json_bytes > kMaxRestJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request's JSON is ", json_bytes, " bytes, more than castserve ",
        "parses (", kMaxRestJsonBytes,
        "); send large tensors as binary data (Triton's binary tensor ",
        "extension: binary_data_size and Inference-Header-Content-Length)"));
  }
  platform::JsonLimits limits;
  limits.max_depth = kMaxRestJsonDepth;
  limits.max_bytes = json_bytes;
  absl::StatusOr<json> root =
      platform::ParseJson(body.substr(0, json_bytes), limits);
  if (!root.ok()) return root.status();
  RestInferRequest decoded;
  decoded.request.set_model_name(std::string(model));
  decoded.request.set_model_version(std::string(version));
  if (absl::Status status =
          DecodeRoot(*root, body.substr(json_bytes), &decoded);
      !status.ok()) {
    return status;
  }
  return decoded;
}

absl::StatusOr<json> RestOutputData(
    const inference::ModelInferResponse& response, int index) {
  return DataOf(response.outputs(index),
                index < response.raw_output_contents_size()
                    ? response.raw_output_contents(index)
                    : absl::string_view());
}

absl::StatusOr<RestInferResponse> EncodeRestInferResponse(
    const inference::ModelInferResponse& response,
    const RestOutputFormat& format) {
  json root = json::object();
  root["model_name"] = response.model_name();
  root["model_version"] = response.model_version();
  if (!response.id().empty()) root["id"] = response.id();
  json outputs = json::array();
  std::string binary;
  bool any_binary = false;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    json entry = {{"name", output.name()},
                  {"datatype", output.datatype()},
                  {"shape", json(std::vector<int64_t>(output.shape().begin(),
                                                      output.shape().end()))}};
    if (format.IsBinary(output.name())) {
      const absl::string_view raw = i < response.raw_output_contents_size()
                                        ? response.raw_output_contents(i)
                                        : absl::string_view();
      entry["parameters"] = {{"binary_data_size", raw.size()}};
      binary.append(raw.data(), raw.size());
      any_binary = true;
    } else {
      absl::StatusOr<json> data = RestOutputData(response, i);
      if (!data.ok()) return data.status();
      entry["data"] = *std::move(data);
    }
    outputs.push_back(std::move(entry));
  }
  root["outputs"] = std::move(outputs);
  RestInferResponse encoded;
  // Invalid UTF-8 in a BYTES output becomes U+FFFD: JSON text cannot carry
  // it (binary_data can).
  encoded.body = root.dump(-1, ' ', false, json::error_handler_t::replace);
  if (any_binary) {
    encoded.header_length = encoded.body.size();
    encoded.body += binary;
  }
  return encoded;
}

}  // namespace castserve
