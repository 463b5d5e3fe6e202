#include "client/tensor_io.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire's raw tensors are little-endian; so must the host be");

namespace castserve {
namespace {

using ::google::protobuf::Value;

enum class Kind { kBool, kUnsigned, kSigned, kHalf, kBFloat16, kFloat };

struct Datatype {
  const char* name;
  int size_bytes;
  Kind kind;
  const char* npy_descr;  // BF16 is written as float32.
};

constexpr Datatype kDatatypes[] = {
    {"BOOL", 1, Kind::kBool, "|b1"},    {"UINT8", 1, Kind::kUnsigned, "|u1"},
    {"INT8", 1, Kind::kSigned, "|i1"},  {"INT16", 2, Kind::kSigned, "<i2"},
    {"INT32", 4, Kind::kSigned, "<i4"}, {"INT64", 8, Kind::kSigned, "<i8"},
    {"FP16", 2, Kind::kHalf, "<f2"},    {"BF16", 2, Kind::kBFloat16, "<f4"},
    {"FP32", 4, Kind::kFloat, "<f4"},   {"FP64", 8, Kind::kFloat, "<f8"},
};

const Datatype* FindDatatype(const std::string& name) {
  for (const Datatype& datatype : kDatatypes) {
    if (name == datatype.name) return &datatype;
  }
  return nullptr;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const int32_t float_exponent = (bits >> 23) & 0xff;
  uint32_t mantissa = bits & 0x7fffff;
  if (float_exponent == 0xff) {
    return sign | 0x7c00 | (mantissa != 0 ? 0x200 : 0);
  }
  const int32_t exponent = float_exponent - 127 + 15;
  if (exponent >= 31) return sign | 0x7c00;
  if (exponent <= 0) {
    if (exponent < -10) return sign;
    mantissa |= 0x800000;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return sign | half;
  }
  uint32_t half = sign | (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = (half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0) {
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  const uint32_t bits =
      exponent == 31 ? sign | 0x7f800000 | (mantissa << 13)
                     : sign | ((exponent + 112) << 23) | (mantissa << 13);
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float BFloat16ToFloat(uint16_t bfloat) {
  const uint32_t bits = static_cast<uint32_t>(bfloat) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

template <typename T>
void Append(T value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Load(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

absl::Status EncodeInteger(const Datatype& datatype, double value,
                           std::string* out) {
  if (std::trunc(value) != value) {
    return absl::InvalidArgumentError(
        absl::StrCat(value, " is not an integer"));
  }
  const bool is_unsigned = datatype.kind == Kind::kUnsigned;
  const int bits = datatype.size_bytes * 8;
  const double low = is_unsigned ? 0 : -std::ldexp(1.0, bits - 1);
  const double high = std::ldexp(1.0, is_unsigned ? bits : bits - 1);
  if (value < low || value >= high) {
    return absl::InvalidArgumentError(
        absl::StrCat(value, " is out of range for ", datatype.name));
  }
  const int64_t integer = static_cast<int64_t>(value);
  out->append(reinterpret_cast<const char*>(&integer), datatype.size_bytes);
  return absl::OkStatus();
}

absl::Status EncodeElement(const Datatype& datatype, const Value& element,
                           std::string* out) {
  double number = 0;
  if (element.kind_case() == Value::kBoolValue) {
    number = element.bool_value() ? 1 : 0;
  } else if (element.kind_case() == Value::kNumberValue) {
    number = element.number_value();
  } else {
    return absl::InvalidArgumentError("data holds a value that is no number");
  }
  switch (datatype.kind) {
    case Kind::kBool:
      if (number != 0 && number != 1) {
        return absl::InvalidArgumentError("BOOL data must be true/false/0/1");
      }
      out->push_back(static_cast<char>(number));
      return absl::OkStatus();
    case Kind::kUnsigned:
    case Kind::kSigned:
      return EncodeInteger(datatype, number, out);
    case Kind::kHalf:
      Append(FloatToHalf(static_cast<float>(number)), out);
      return absl::OkStatus();
    case Kind::kBFloat16:
      Append(FloatToBFloat16(static_cast<float>(number)), out);
      return absl::OkStatus();
    case Kind::kFloat:
      if (datatype.size_bytes == 4) {
        Append(static_cast<float>(number), out);
      } else {
        Append(number, out);
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Flattens nested lists row-major.
absl::Status EncodeData(const Datatype& datatype, const Value& data,
                        int64_t* count, std::string* out) {
  if (data.kind_case() == Value::kListValue) {
    for (const Value& element : data.list_value().values()) {
      if (absl::Status status = EncodeData(datatype, element, count, out);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  ++*count;
  return EncodeElement(datatype, data, out);
}

// BYTES data: strings (flat or nested), each as a 4-byte little-endian
// length followed by its bytes, as on the wire.
absl::Status EncodeStrings(const Value& data, int64_t* count,
                           std::string* out) {
  if (data.kind_case() == Value::kListValue) {
    for (const Value& element : data.list_value().values()) {
      if (absl::Status status = EncodeStrings(element, count, out);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }
  if (data.kind_case() != Value::kStringValue) {
    return absl::InvalidArgumentError("BYTES data must be strings");
  }
  ++*count;
  const std::string& text = data.string_value();
  Append(static_cast<uint32_t>(text.size()), out);
  out->append(text);
  return absl::OkStatus();
}

absl::Status AddInput(const std::string& name,
                      const google::protobuf::Struct& spec,
                      inference::ModelInferRequest* request) {
  const auto& fields = spec.fields();
  auto datatype_field = fields.find("datatype");
  auto shape_field = fields.find("shape");
  auto data_field = fields.find("data");
  if (datatype_field == fields.end() || shape_field == fields.end() ||
      data_field == fields.end() ||
      shape_field->second.kind_case() != Value::kListValue) {
    return absl::InvalidArgumentError(
        "needs \"datatype\", \"shape\" (a list) and \"data\"");
  }
  const bool is_bytes = datatype_field->second.string_value() == "BYTES";
  const Datatype* datatype =
      FindDatatype(datatype_field->second.string_value());
  if (datatype == nullptr && !is_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported datatype '", datatype_field->second.string_value(), "'"));
  }
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype_field->second.string_value());
  int64_t expected = 1;
  for (const Value& dim : shape_field->second.list_value().values()) {
    const int64_t size = static_cast<int64_t>(dim.number_value());
    input->add_shape(size);
    expected *= size;
  }
  std::string* raw = request->add_raw_input_contents();
  int64_t count = 0;
  if (absl::Status status =
          is_bytes ? EncodeStrings(data_field->second, &count, raw)
                   : EncodeData(*datatype, data_field->second, &count, raw);
      !status.ok()) {
    return status;
  }
  if (count != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data has ", count, " elements; the shape needs ", expected));
  }
  return absl::OkStatus();
}

// Element `i` of raw data as JSON text.
std::string ElementJson(const Datatype& datatype, const char* bytes) {
  switch (datatype.kind) {
    case Kind::kBool:
      return *bytes != 0 ? "true" : "false";
    case Kind::kUnsigned:
      return absl::StrCat(Load<uint8_t>(bytes));
    case Kind::kSigned:
      switch (datatype.size_bytes) {
        case 1:
          return absl::StrCat(Load<int8_t>(bytes));
        case 2:
          return absl::StrCat(Load<int16_t>(bytes));
        case 4:
          return absl::StrCat(Load<int32_t>(bytes));
        default:
          return absl::StrCat(Load<int64_t>(bytes));
      }
    case Kind::kHalf:
      return absl::StrFormat("%.9g", HalfToFloat(Load<uint16_t>(bytes)));
    case Kind::kBFloat16:
      return absl::StrFormat("%.9g", BFloat16ToFloat(Load<uint16_t>(bytes)));
    case Kind::kFloat:
      if (datatype.size_bytes == 4) {
        return absl::StrFormat("%.9g", Load<float>(bytes));
      }
      return absl::StrFormat("%.17g", Load<double>(bytes));
  }
  return "null";
}

// The datatype of output `index`, checked against its raw byte size.
absl::StatusOr<const Datatype*> CheckedOutput(
    const inference::ModelInferResponse& response, int index) {
  if (index >= response.raw_output_contents_size()) {
    return absl::InvalidArgumentError(
        "the response has no raw contents for every output");
  }
  const auto& output = response.outputs(index);
  const Datatype* datatype = FindDatatype(output.datatype());
  if (datatype == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", output.name(), "' has unsupported datatype ",
                     output.datatype()));
  }
  int64_t elements = 1;
  for (int64_t dim : output.shape()) elements *= dim;
  if (static_cast<int64_t>(response.raw_output_contents(index).size()) !=
      elements * datatype->size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output '", output.name(), "' has ",
        response.raw_output_contents(index).size(), " bytes for its shape"));
  }
  return datatype;
}

}  // namespace

absl::Status AddInputsFromJson(const std::string& json,
                               inference::ModelInferRequest* request) {
  google::protobuf::Struct inputs;
  auto parsed = google::protobuf::util::JsonStringToMessage(json, &inputs);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs are not a JSON object: ", parsed.message().as_string()));
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : inputs.fields()) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const Value& value = inputs.fields().at(name);
    if (value.kind_case() != Value::kStructValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is not a JSON object"));
    }
    if (absl::Status status = AddInput(name, value.struct_value(), request);
        !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("input '", name,
                                                      "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status AddInputFromNpy(const std::string& name, const std::string& npy,
                             inference::ModelInferRequest* request) {
  const std::string where = absl::StrCat("input '", name, "': ");
  if (npy.size() < 10 || npy.compare(0, 6, "\x93NUMPY") != 0) {
    return absl::InvalidArgumentError(where + "not a .npy file");
  }
  const bool long_header = npy[6] >= 2;
  const size_t header_start = long_header ? 12 : 10;
  const size_t header_bytes = long_header ? Load<uint32_t>(npy.data() + 8)
                                          : Load<uint16_t>(npy.data() + 8);
  if (npy.size() < header_start + header_bytes) {
    return absl::InvalidArgumentError(where + ".npy header is truncated");
  }
  const std::string header = npy.substr(header_start, header_bytes);
  if (header.find("'fortran_order': True") != std::string::npos) {
    return absl::InvalidArgumentError(where +
                                      "Fortran-order .npy arrays are "
                                      "not supported");
  }
  const Datatype* datatype = nullptr;
  for (const Datatype& candidate : kDatatypes) {
    if (candidate.kind != Kind::kBFloat16 &&
        header.find(absl::StrCat("'descr': '", candidate.npy_descr, "'")) !=
            std::string::npos) {
      datatype = &candidate;
    }
  }
  const size_t shape_begin = header.find("'shape': (");
  const size_t shape_end = header.find(')', shape_begin);
  if (datatype == nullptr || shape_begin == std::string::npos ||
      shape_end == std::string::npos) {
    return absl::InvalidArgumentError(
        where + "unsupported .npy dtype or header: " + header);
  }
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype->name);
  int64_t elements = 1;
  const size_t dims_begin = shape_begin + 10;
  for (absl::string_view dim : absl::StrSplit(
           absl::string_view(header).substr(dims_begin, shape_end - dims_begin),
           ',', absl::SkipWhitespace())) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(dim, &size)) {
      return absl::InvalidArgumentError(where + "bad .npy shape: " + header);
    }
    input->add_shape(size);
    elements *= size;
  }
  const std::string data = npy.substr(header_start + header_bytes);
  if (static_cast<int64_t>(data.size()) != elements * datatype->size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".npy data has ",
                                                   data.size(), " bytes for ",
                                                   elements, " elements"));
  }
  request->add_raw_input_contents(data);
  return absl::OkStatus();
}

absl::Status AddInputsFromSafetensors(const std::string& safetensors,
                                      inference::ModelInferRequest* request) {
  static const auto* const kDtypes = new std::map<std::string, std::string>{
      {"F16", "FP16"},  {"BF16", "BF16"}, {"F32", "FP32"},  {"F64", "FP64"},
      {"I64", "INT64"}, {"I32", "INT32"}, {"I16", "INT16"}, {"I8", "INT8"},
      {"U8", "UINT8"},  {"BOOL", "BOOL"}};
  if (safetensors.size() < 8) {
    return absl::InvalidArgumentError("not a .safetensors file");
  }
  const uint64_t header_bytes = Load<uint64_t>(safetensors.data());
  if (header_bytes > safetensors.size() - 8) {
    return absl::InvalidArgumentError(".safetensors header is truncated");
  }
  google::protobuf::Struct header;
  if (!google::protobuf::util::JsonStringToMessage(
           safetensors.substr(8, header_bytes), &header)
           .ok()) {
    return absl::InvalidArgumentError(".safetensors header is not JSON");
  }
  const size_t data_start = 8 + header_bytes;
  std::vector<std::string> names;
  for (const auto& [name, value] : header.fields()) {
    if (name != "__metadata__") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const auto& fields = header.fields().at(name).struct_value().fields();
    auto dtype = kDtypes->find(
        fields.count("dtype") > 0 ? fields.at("dtype").string_value() : "");
    if (dtype == kDtypes->end() || fields.count("shape") == 0 ||
        fields.count("data_offsets") == 0 ||
        fields.at("data_offsets").list_value().values_size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': unsupported dtype or bad entry"));
    }
    const auto& offsets = fields.at("data_offsets").list_value();
    const auto begin = static_cast<size_t>(offsets.values(0).number_value());
    const auto end = static_cast<size_t>(offsets.values(1).number_value());
    if (begin > end || data_start + end > safetensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': data outside the file"));
    }
    auto* input = request->add_inputs();
    input->set_name(name);
    input->set_datatype(dtype->second);
    for (const Value& dim : fields.at("shape").list_value().values()) {
      input->add_shape(static_cast<int64_t>(dim.number_value()));
    }
    request->add_raw_input_contents(
        safetensors.substr(data_start + begin, end - begin));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> OutputsToJson(
    const inference::ModelInferResponse& response) {
  std::vector<std::string> entries;
  for (int i = 0; i < response.outputs_size(); ++i) {
    absl::StatusOr<const Datatype*> datatype = CheckedOutput(response, i);
    if (!datatype.ok()) return datatype.status();
    const std::string& raw = response.raw_output_contents(i);
    std::vector<std::string> data;
    for (size_t offset = 0; offset < raw.size();
         offset += (*datatype)->size_bytes) {
      data.push_back(ElementJson(**datatype, raw.data() + offset));
    }
    const auto& output = response.outputs(i);
    entries.push_back(absl::StrCat(
        "\"", output.name(), "\": {\"datatype\": \"", output.datatype(),
        "\", \"shape\": [", absl::StrJoin(output.shape(), ", "),
        "], \"data\": [", absl::StrJoin(data, ", "), "]}"));
  }
  return absl::StrCat("{", absl::StrJoin(entries, ",\n "), "}");
}

absl::StatusOr<std::string> OutputToNpy(
    const inference::ModelInferResponse& response, int index) {
  absl::StatusOr<const Datatype*> datatype = CheckedOutput(response, index);
  if (!datatype.ok()) return datatype.status();
  const auto& output = response.outputs(index);
  std::string shape = absl::StrJoin(output.shape(), ", ");
  if (output.shape_size() == 1) shape += ",";
  std::string header =
      absl::StrCat("{'descr': '", (*datatype)->npy_descr,
                   "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n', 64-byte aligned.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string npy("\x93NUMPY\x01\x00", 8);
  Append(static_cast<uint16_t>(header.size()), &npy);
  npy += header;
  const std::string& raw = response.raw_output_contents(index);
  if ((*datatype)->kind == Kind::kBFloat16) {
    for (size_t offset = 0; offset < raw.size(); offset += 2) {
      Append(BFloat16ToFloat(Load<uint16_t>(raw.data() + offset)), &npy);
    }
  } else {
    npy += raw;
  }
  return npy;
}

}  // namespace castserve
