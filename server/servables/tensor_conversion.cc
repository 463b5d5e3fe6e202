#include "server/servables/tensor_conversion.h"

#include <ATen/ATen.h>

#include <cstring>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/device/torch_types.h"
#include "server/servables/text_input.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire's raw tensors are little-endian; so must the host be");

namespace castserve {
namespace {

using ::google::protobuf::RepeatedField;
using InputTensor = inference::ModelInferRequest::InferInputTensor;

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string Quoted(const std::string& name) {
  return absl::StrCat("'", name, "'");
}

std::string SpecNames(const std::vector<models::TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const models::TensorSpec& spec : specs)
    names.push_back(Quoted(spec.name));
  return absl::StrJoin(names, ", ");
}

// Rank, each dimension, and the batch rules.
absl::Status CheckShape(const InputTensor& input,
                        const models::TensorSpec& spec,
                        int64_t max_batch_size) {
  const auto& shape = input.shape();
  const std::string prefix = absl::StrCat("input ", Quoted(input.name()), ": ");
  if (shape.size() != static_cast<int>(spec.shape.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "shape ", ShapeString(shape), " has rank ",
                     shape.size(), ", expected rank ", spec.shape.size(),
                     " (shape ", ShapeString(spec.shape), ")"));
  }
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "dimension ", i, " is ", shape[i],
                       "; dimensions must be >= 0"));
    }
    if (spec.shape[i] >= 0 && shape[i] != spec.shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "dimension ", i, " is ", shape[i], ", expected ",
          spec.shape[i], " (shape ", ShapeString(spec.shape), ")"));
    }
  }
  if (max_batch_size > 0) {
    if (shape.empty() || shape[0] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "needs a batch dimension of at least 1"));
    }
    if (shape[0] > max_batch_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "batch size ", shape[0],
                       " exceeds max_batch_size ", max_batch_size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ElementCount(const InputTensor& input) {
  int64_t count = 1;
  for (int64_t dim : input.shape()) {
    if (__builtin_mul_overflow(count, dim, &count) ||
        count > (int64_t{1} << 50)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", Quoted(input.name()), ": shape ",
                       ShapeString(input.shape()), " is too large"));
    }
  }
  return count;
}

// The typed-contents arrays as (field name, element count).
std::vector<std::pair<const char*, int>> TypedFields(
    const inference::InferTensorContents& contents) {
  return {{"bool_contents", contents.bool_contents_size()},
          {"int_contents", contents.int_contents_size()},
          {"int64_contents", contents.int64_contents_size()},
          {"uint_contents", contents.uint_contents_size()},
          {"uint64_contents", contents.uint64_contents_size()},
          {"fp32_contents", contents.fp32_contents_size()},
          {"fp64_contents", contents.fp64_contents_size()},
          {"bytes_contents", contents.bytes_contents_size()}};
}

bool HasTypedContents(const InputTensor& input) {
  if (!input.has_contents()) return false;
  for (const auto& [field, count] : TypedFields(input.contents())) {
    if (count > 0) return true;
  }
  return false;
}

// The field that carries `dtype` in typed contents (the dtype table's
// wire_contents_field); null for FP16/BF16.
const char* TypedFieldFor(at::ScalarType dtype) {
  const casting::DtypeRow* row = casting::FindByTorchScalarType(dtype);
  if (row == nullptr || row->wire_contents_field.empty()) return nullptr;
  return row->wire_contents_field.data();  // A NUL-terminated literal.
}

template <typename Element, typename Wire>
absl::Status CopyTyped(const RepeatedField<Wire>& values,
                       const std::string& name, at::Tensor& tensor) {
  Element* out = tensor.data_ptr<Element>();
  for (int i = 0; i < values.size(); ++i) {
    const Wire value = values[i];
    if constexpr (std::is_integral_v<Element> &&
                  !std::is_same_v<Element, bool> &&
                  sizeof(Element) < sizeof(Wire)) {
      if (value < static_cast<Wire>(std::numeric_limits<Element>::lowest()) ||
          value > static_cast<Wire>(std::numeric_limits<Element>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", Quoted(name), ": element ", i, " (", value,
                         ") is out of range for ",
                         DatatypeName(tensor.scalar_type()).value()));
      }
    }
    out[i] = static_cast<Element>(value);
  }
  return absl::OkStatus();
}

// Typed contents: in the field of `dtype` only, as many as the shape's
// elements. Checked before the tensor is allocated.
absl::Status CheckTypedSize(const InputTensor& input, at::ScalarType dtype,
                            int64_t element_count) {
  const std::string prefix = absl::StrCat("input ", Quoted(input.name()), ": ");
  const char* field = TypedFieldFor(dtype);
  if (field == nullptr) {
    if (element_count == 0 && !HasTypedContents(input)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, input.datatype(),
        " data must be sent in raw_input_contents (no typed contents field)"));
  }
  for (const auto& [name, count] : TypedFields(input.contents())) {
    if (count > 0 && std::strcmp(name, field) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, input.datatype(),
                                                     " data belongs in ", field,
                                                     ", not ", name));
    }
    if (std::strcmp(name, field) == 0 && count != element_count) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, field, " has ", count, " elements; shape ",
                       ShapeString(input.shape()), " needs ", element_count));
    }
  }
  return absl::OkStatus();
}

// Copies typed contents that passed CheckTypedSize.
absl::Status FillFromTyped(const InputTensor& input, at::Tensor& tensor) {
  const inference::InferTensorContents& contents = input.contents();
  switch (tensor.scalar_type()) {
    case at::kBool:
      return CopyTyped<bool>(contents.bool_contents(), input.name(), tensor);
    case at::kByte:
      return CopyTyped<uint8_t>(contents.uint_contents(), input.name(), tensor);
    case at::kChar:
      return CopyTyped<int8_t>(contents.int_contents(), input.name(), tensor);
    case at::kShort:
      return CopyTyped<int16_t>(contents.int_contents(), input.name(), tensor);
    case at::kInt:
      return CopyTyped<int32_t>(contents.int_contents(), input.name(), tensor);
    case at::kLong:
      return CopyTyped<int64_t>(contents.int64_contents(), input.name(),
                                tensor);
    case at::kFloat:
      return CopyTyped<float>(contents.fp32_contents(), input.name(), tensor);
    case at::kDouble:
      return CopyTyped<double>(contents.fp64_contents(), input.name(), tensor);
    default:
      return absl::OkStatus();  // No typed field: no elements to copy.
  }
}

// Raw contents: the shape's bytes exactly. Checked before the tensor is
// allocated.
absl::Status CheckRawSize(const InputTensor& input, const std::string& raw,
                          at::ScalarType dtype, int64_t element_count) {
  // At most 2^50 elements (ElementCount) of at most 8 bytes: no overflow.
  const int64_t expected_bytes =
      element_count * static_cast<int64_t>(at::elementSize(dtype));
  if (static_cast<int64_t>(raw.size()) != expected_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", Quoted(input.name()), ": raw data has ",
                     raw.size(), " bytes; shape ", ShapeString(input.shape()),
                     " of ", input.datatype(), " needs ", expected_bytes));
  }
  return absl::OkStatus();
}

// Copies raw contents that passed CheckRawSize.
absl::Status FillFromRaw(const InputTensor& input, const std::string& raw,
                         at::Tensor& tensor) {
  if (tensor.scalar_type() == at::kBool) {
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != 0 && raw[i] != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", Quoted(input.name()), ": BOOL element ", i,
                         " is not 0 or 1 (BOOL is one byte)"));
      }
    }
  }
  if (!raw.empty()) std::memcpy(tensor.data_ptr(), raw.data(), raw.size());
  return absl::OkStatus();
}

// The checks of one input against its spec, then its tensor; `raw` is null
// for typed contents.
absl::StatusOr<at::Tensor> ConvertInput(const InputTensor& input,
                                        const models::TensorSpec& spec,
                                        int64_t max_batch_size,
                                        const std::string* raw) {
  const std::string prefix = absl::StrCat("input ", Quoted(input.name()), ": ");
  absl::StatusOr<at::ScalarType> dtype =
      ScalarTypeFromDatatype(input.datatype());
  const std::string expected = DatatypeName(spec.dtype).value_or("?");
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, dtype.status().message(), "; the model expects ", expected));
  }
  if (*dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "datatype ", input.datatype(), ", expected ", expected));
  }
  if (absl::Status status = CheckShape(input, spec, max_batch_size);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> element_count = ElementCount(input);
  if (!element_count.ok()) return element_count.status();
  // The data must fill the shape before the shape is allocated: a request
  // of a few bytes cannot claim terabytes.
  absl::Status sized =
      raw != nullptr ? CheckRawSize(input, *raw, spec.dtype, *element_count)
                     : CheckTypedSize(input, spec.dtype, *element_count);
  if (!sized.ok()) return sized;
  std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(spec.dtype));
  absl::Status filled = raw != nullptr ? FillFromRaw(input, *raw, tensor)
                                       : FillFromTyped(input, tensor);
  if (!filled.ok()) return filled;
  return tensor;
}

absl::Status CheckRawLayout(const inference::ModelInferRequest& request) {
  if (request.raw_input_contents_size() == 0) return absl::OkStatus();
  for (const InputTensor& input : request.inputs()) {
    if (HasTypedContents(input)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", Quoted(input.name()),
          " sets typed contents while the request uses raw_input_contents; "
          "send all inputs raw or all typed"));
    }
  }
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ",
                     request.raw_input_contents_size(), " entries for ",
                     request.inputs_size(), " inputs; expected one per input"));
  }
  return absl::OkStatus();
}

const models::TensorSpec* FindSpec(const std::vector<models::TensorSpec>& specs,
                                   const std::string& name) {
  for (const models::TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

absl::StatusOr<models::NamedTensors> ConvertInputs(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& specs, int64_t max_batch_size) {
  if (absl::Status status = CheckRawLayout(request); !status.ok()) {
    return status;
  }
  models::NamedTensors tensors;
  int64_t batch_size = -1;
  std::string batch_input;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const InputTensor& input = request.inputs(i);
    const models::TensorSpec* spec = FindSpec(specs, input.name());
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input ", Quoted(input.name()),
                       "; the model's inputs are ", SpecNames(specs)));
    }
    if (tensors.count(input.name()) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", Quoted(input.name()), " is given twice"));
    }
    const std::string* raw = request.raw_input_contents_size() > 0
                                 ? &request.raw_input_contents(i)
                                 : nullptr;
    absl::StatusOr<at::Tensor> tensor =
        ConvertInput(input, *spec, max_batch_size, raw);
    if (!tensor.ok()) return tensor.status();
    if (max_batch_size > 0) {
      if (batch_size >= 0 && input.shape(0) != batch_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input ", Quoted(input.name()), ": batch size ", input.shape(0),
            " differs from input ", Quoted(batch_input), "'s ", batch_size));
      }
      batch_size = input.shape(0);
      batch_input = input.name();
    }
    tensors.emplace(input.name(), *std::move(tensor));
  }
  for (const models::TensorSpec& spec : specs) {
    if (!spec.optional && tensors.count(spec.name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input ", Quoted(spec.name)));
    }
  }
  return tensors;
}

// --- The text input ---------------------------------------------------------

std::string TextPrefix(absl::string_view name = kTextInputName) {
  return absl::StrCat("input '", name, "': ");
}

// The text input's batch size: shape [batch] or [batch, 1], batch in
// [1, max_batch_size] when batched.
absl::StatusOr<int64_t> TextBatchSize(const InputTensor& input,
                                      int64_t max_batch_size) {
  const auto& shape = input.shape();
  const std::string prefix = TextPrefix(input.name());
  const bool rank_ok =
      shape.size() == 1 || (shape.size() == 2 && shape[1] == 1);
  if (!rank_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "shape ", ShapeString(shape),
                     "; expected [batch, 1] (or [batch]): one string per "
                     "batch element"));
  }
  if (shape[0] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "shape ", ShapeString(shape), " holds no string"));
  }
  if (max_batch_size > 0 && shape[0] > max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "batch size ", shape[0],
                     " exceeds max_batch_size ", max_batch_size));
  }
  return shape[0];
}

absl::Status CheckTextBytes(size_t bytes, int64_t index,
                            absl::string_view name) {
  if (static_cast<int64_t>(bytes) <= kMaxTextBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(TextPrefix(name), "element ", index, " has ", bytes,
                   " bytes, above the limit of ", kMaxTextBytes));
}

// BYTES raw contents: per element a 4-byte little-endian length, then that
// many bytes; exactly `count` elements.
absl::StatusOr<std::vector<std::string>> StringsFromRaw(
    const std::string& raw, int64_t count, absl::string_view name) {
  const std::string prefix = TextPrefix(name);
  std::vector<std::string> strings;
  size_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (raw.size() - offset < 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "raw data ends before the length of element ", i,
          " (each BYTES element is a 4-byte little-endian length, then its "
          "bytes)"));
    }
    uint32_t length = 0;
    std::memcpy(&length, raw.data() + offset, 4);
    offset += 4;
    if (absl::Status small = CheckTextBytes(length, i, name); !small.ok()) {
      return small;
    }
    if (raw.size() - offset < length) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "raw data ends inside element ", i, " (", length,
                       " bytes announced, ", raw.size() - offset, " left)"));
    }
    strings.emplace_back(raw.data() + offset, length);
    offset += length;
  }
  if (offset != raw.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "raw data has ", raw.size() - offset,
                     " bytes after its ", count, " elements"));
  }
  return strings;
}

// BYTES typed contents: bytes_contents, exactly `count` elements.
absl::StatusOr<std::vector<std::string>> StringsFromTyped(
    const InputTensor& input, int64_t count) {
  const std::string prefix = TextPrefix(input.name());
  for (const auto& [field, size] : TypedFields(input.contents())) {
    if (size > 0 && std::strcmp(field, "bytes_contents") != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "BYTES data belongs in bytes_contents, not ", field));
    }
  }
  const auto& contents = input.contents().bytes_contents();
  if (contents.size() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "bytes_contents has ", contents.size(), " elements; shape ",
        ShapeString(input.shape()), " needs ", count));
  }
  std::vector<std::string> strings;
  for (int i = 0; i < contents.size(); ++i) {
    if (absl::Status small =
            CheckTextBytes(contents[i].size(), i, input.name());
        !small.ok()) {
      return small;
    }
    strings.push_back(contents[i]);
  }
  return strings;
}

// The inputs the text input fills (TextInput::Encode's tensors).
bool IsTokenInput(const std::string& name) {
  return name == "input_ids" || name == "attention_mask" ||
         name == "token_type_ids";
}

// The strings of the request's text input (at `index`), checked: no input
// the text fills may come beside it.
absl::StatusOr<std::vector<std::string>> TextStrings(
    const inference::ModelInferRequest& request, int index,
    int64_t max_batch_size) {
  for (const auto& input : request.inputs()) {
    if (!IsTokenInput(input.name())) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(TextPrefix(),
                     "a request sends either text or the token inputs, not "
                     "both (it also has ",
                     Quoted(input.name()), ")"));
  }
  return StringsOfInput(request, index, max_batch_size);
}

// `request` less its input at `index` (and that input's raw contents).
inference::ModelInferRequest WithoutInput(
    const inference::ModelInferRequest& request, int index) {
  inference::ModelInferRequest rest = request;
  rest.clear_inputs();
  rest.clear_raw_input_contents();
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (i != index) *rest.add_inputs() = request.inputs(i);
  }
  // Entry i belongs to input i; a count that does not match stays so, for
  // ConvertInputs to name.
  for (int i = 0; i < request.raw_input_contents_size(); ++i) {
    if (i != index) {
      rest.add_raw_input_contents(request.raw_input_contents(i));
    }
  }
  return rest;
}

// The inputs the request sends beside its text (at `text_index`), decoded
// against the specs text does not fill (an image-text model's
// pixel_values), with as many batch elements as `texts`.
absl::StatusOr<models::NamedTensors> InputsBesideText(
    const inference::ModelInferRequest& request, int text_index,
    const std::vector<models::TensorSpec>& input_specs, int64_t max_batch_size,
    int64_t texts) {
  if (request.inputs_size() == 1) return models::NamedTensors{};
  std::vector<models::TensorSpec> others;
  for (const models::TensorSpec& spec : input_specs) {
    if (!IsTokenInput(spec.name)) others.push_back(spec);
  }
  absl::StatusOr<models::NamedTensors> inputs = InputsFromRequest(
      WithoutInput(request, text_index), others, max_batch_size);
  if (!inputs.ok() || max_batch_size <= 0 || inputs->empty()) return inputs;
  const auto& [name, first] = *inputs->begin();
  if (first.size(0) != texts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs ", Quoted(kTextInputName), " and ", Quoted(name), " have ",
        texts, " and ", first.size(0),
        " batch elements; one request's inputs share the batch dimension"));
  }
  return inputs;
}

// The token inputs of the request's text input (at `index`), and the
// request's other inputs beside them.
absl::StatusOr<models::NamedTensors> InputsFromText(
    const inference::ModelInferRequest& request, int index,
    const std::vector<models::TensorSpec>& input_specs, int64_t max_batch_size,
    const TextInput* text) {
  if (text == nullptr || !text->available()) {
    return absl::InvalidArgumentError(
        text != nullptr
            ? text->unavailable_reason()
            : absl::StrCat(TextPrefix(), "the model folder has no tokenizer"));
  }
  absl::StatusOr<std::vector<std::string>> strings =
      TextStrings(request, index, max_batch_size);
  if (!strings.ok()) return strings.status();
  absl::StatusOr<models::NamedTensors> others =
      InputsBesideText(request, index, input_specs, max_batch_size,
                       static_cast<int64_t>(strings->size()));
  if (!others.ok()) return others.status();
  absl::StatusOr<models::NamedTensors> tokens = text->Encode(*strings);
  if (!tokens.ok()) return tokens.status();
  tokens->insert(others->begin(), others->end());
  return tokens;
}

// The index of the request's input named `name`, or -1.
int FindRequestInput(const inference::ModelInferRequest& request,
                     const std::string& name) {
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (request.inputs(i).name() == name) return i;
  }
  return -1;
}

// The token inputs of the request's `query` and `document` inputs (a
// cross-encoder's): both, alone, with as many strings each.
absl::StatusOr<models::NamedTensors> InputsFromPairs(
    const inference::ModelInferRequest& request, int64_t max_batch_size,
    const TextInput* text) {
  if (text == nullptr || !text->pairs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs ", Quoted(kQueryInputName), " and ", Quoted(kDocumentInputName),
        " are for a cross-encoder (a model with a 'scores' output and a "
        "tokenizer with a pair template); this model takes ",
        text != nullptr && !text->available() ? text->unavailable_reason()
                                              : "no pairs"));
  }
  const int query = FindRequestInput(request, kQueryInputName);
  const int document = FindRequestInput(request, kDocumentInputName);
  if (query < 0 || document < 0 || request.inputs_size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pair request sends exactly the inputs ", Quoted(kQueryInputName),
        " and ", Quoted(kDocumentInputName), "; this one has ",
        request.inputs_size(), " inputs"));
  }
  absl::StatusOr<std::vector<std::string>> queries =
      StringsOfInput(request, query, max_batch_size);
  if (!queries.ok()) return queries.status();
  absl::StatusOr<std::vector<std::string>> documents =
      StringsOfInput(request, document, max_batch_size);
  if (!documents.ok()) return documents.status();
  if (queries->size() != documents->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", Quoted(kQueryInputName), " has ",
                     queries->size(), " strings, ", Quoted(kDocumentInputName),
                     " ", documents->size(), "; one query per document"));
  }
  return text->EncodePairs(*queries, *documents);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> StringsOfInput(
    const inference::ModelInferRequest& request, int index,
    int64_t max_batch_size) {
  const InputTensor& input = request.inputs(index);
  if (input.datatype() != "BYTES") {
    return absl::InvalidArgumentError(
        absl::StrCat(TextPrefix(input.name()), "datatype ", input.datatype(),
                     ", expected BYTES"));
  }
  if (absl::Status layout = CheckRawLayout(request); !layout.ok()) {
    return layout;
  }
  absl::StatusOr<int64_t> count = TextBatchSize(input, max_batch_size);
  if (!count.ok()) return count.status();
  return request.raw_input_contents_size() > 0
             ? StringsFromRaw(request.raw_input_contents(index), *count,
                              input.name())
             : StringsFromTyped(input, *count);
}

absl::StatusOr<models::NamedTensors> InputsFromRequest(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& specs, int64_t max_batch_size) {
  // A tensor LibTorch cannot allocate fails the request, not the thread.
  return models::CatchExceptions(
      [&] { return ConvertInputs(request, specs, max_batch_size); });
}

absl::StatusOr<std::vector<std::string>> RequestedOutputs(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& specs) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& output : request.outputs()) {
    if (FindSpec(specs, output.name()) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output ", Quoted(output.name()),
                       "; the model's outputs are ", SpecNames(specs)));
    }
    if (!seen.insert(output.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output ", Quoted(output.name()), " is requested twice"));
    }
    names.push_back(output.name());
  }
  return names;
}

absl::StatusOr<DecodedRequest> DecodeRequest(
    const inference::ModelInferRequest& request,
    const std::vector<models::TensorSpec>& input_specs,
    const std::vector<models::TensorSpec>& output_specs, int64_t max_batch_size,
    const TextInput* text) {
  DecodedRequest decoded;
  absl::StatusOr<std::vector<std::string>> requested =
      RequestedOutputs(request, output_specs);
  if (!requested.ok()) return requested.status();
  decoded.requested_outputs = *std::move(requested);
  if (request.inputs_size() == 0 && text != nullptr && text->available()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request has no input: send ", Quoted(kTextInputName),
                     " (one string per batch element) or the token inputs ",
                     SpecNames(input_specs)));
  }
  const int text_index = FindSpec(input_specs, kTextInputName) == nullptr
                             ? FindRequestInput(request, kTextInputName)
                             : -1;
  const bool pairs = FindSpec(input_specs, kQueryInputName) == nullptr &&
                     (FindRequestInput(request, kQueryInputName) >= 0 ||
                      FindRequestInput(request, kDocumentInputName) >= 0);
  absl::StatusOr<models::NamedTensors> inputs =
      text_index >= 0 ? InputsFromText(request, text_index, input_specs,
                                       max_batch_size, text)
      : pairs         ? InputsFromPairs(request, max_batch_size, text)
                      : InputsFromRequest(request, input_specs, max_batch_size);
  if (!inputs.ok()) return inputs.status();
  decoded.inputs = *std::move(inputs);
  if (max_batch_size > 0) {
    // InputsFromRequest checked that every input has the same batch size.
    if (decoded.inputs.empty()) {
      return absl::InvalidArgumentError(
          "the request has no input to take the batch size from");
    }
    decoded.batch_size = decoded.inputs.begin()->second.size(0);
  }
  return decoded;
}

std::vector<TensorSpec> WireSpecs(
    const std::vector<models::TensorSpec>& specs) {
  std::vector<TensorSpec> wire;
  for (const models::TensorSpec& spec : specs) {
    wire.push_back({spec.name, DatatypeName(spec.dtype).value_or(""),
                    spec.shape, spec.optional});
  }
  return wire;
}

namespace {

absl::Status WriteResponse(const inference::ModelInferRequest& request,
                           const std::vector<models::TensorSpec>& specs,
                           const std::vector<std::string>& requested,
                           const models::NamedTensors& outputs,
                           inference::ModelInferResponse* response) {
  response->set_model_name(request.model_name());
  response->set_model_version("1");
  response->set_id(request.id());
  std::vector<std::string> names = requested;
  if (names.empty()) {
    for (const models::TensorSpec& spec : specs) {
      if (outputs.count(spec.name) > 0) names.push_back(spec.name);
    }
    for (const auto& [name, tensor] : outputs) {
      if (FindSpec(specs, name) == nullptr) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    auto it = outputs.find(name);
    if (it == outputs.end()) {
      return absl::InternalError(
          absl::StrCat("the model did not produce output ", Quoted(name)));
    }
    const at::Tensor cpu = it->second.to(at::kCPU).contiguous();
    absl::StatusOr<std::string> datatype = DatatypeName(cpu.scalar_type());
    if (!datatype.ok()) return datatype.status();
    auto* output = response->add_outputs();
    output->set_name(name);
    output->set_datatype(*datatype);
    for (int64_t dim : cpu.sizes()) output->add_shape(dim);
    response->add_raw_output_contents()->assign(
        static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillResponse(const inference::ModelInferRequest& request,
                          const std::vector<models::TensorSpec>& specs,
                          const std::vector<std::string>& requested,
                          const models::NamedTensors& outputs,
                          inference::ModelInferResponse* response) {
  // An output LibTorch cannot copy fails the request, not the thread.
  return models::CatchExceptions([&] {
    return WriteResponse(request, specs, requested, outputs, response);
  });
}

absl::Status FillResponseWithin(const inference::ModelInferRequest& request,
                                const std::vector<models::TensorSpec>& specs,
                                const std::vector<std::string>& requested,
                                const models::NamedTensors& outputs,
                                int64_t max_response_bytes,
                                inference::ModelInferResponse* response) {
  absl::Status written =
      FillResponse(request, specs, requested, outputs, response);
  const size_t bytes = response->ByteSizeLong();
  if (written.ok() && bytes > static_cast<size_t>(max_response_bytes)) {
    written = absl::ResourceExhaustedError(
        absl::StrCat("the response is ", bytes, " bytes, above the limit of ",
                     max_response_bytes, " bytes (--max-message-bytes)"));
  }
  return written;
}

}  // namespace castserve
