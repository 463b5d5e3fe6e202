// libFuzzer target: a ModelInferRequest against the BERT fixture, along the
// path a served model takes
// (server/servables/batching/batching_served_model.cc): DecodeRequest (the
// request edge's one validation), Model::Forward (its CheckInputs, then the
// forward when the inputs pass and are small), FillResponse. Built by
// tools/run_fuzzers.sh; run from the repository root.
//
// The first input byte chooses how the rest becomes a request: bit 0 clear,
// the rest is the request's wire bytes (ParseFromArray); set, the rest
// drives RequestBuilder, which builds requests the model nearly accepts.
// Bit 1 chooses the config's max_batch_size: 8 or 0 (no batch dimension).
// Requests may carry the text input, tokenized by a fake tokenizer.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "models/model.h"
#include "proto/inference.pb.h"
#include "server/fuzz/bert_fixture.h"
#include "server/servables/tensor_conversion.h"
#include "server/servables/text_input.h"
#include "server/test_util/fake_tokenizer.h"

namespace castserve::fuzz {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

// Requests are built for at most this many elements per input.
constexpr int64_t kMaxBuiltElements = 4096;

// Every datatype string the protocol defines, the unsupported ones too.
constexpr const char* kWireDatatypes[] = {
    "BOOL", "UINT8", "INT8", "INT16",  "INT32",  "INT64",  "FP16",
    "FP32", "FP64",  "BF16", "UINT16", "UINT32", "UINT64", "BYTES"};

// Builds a request from fuzz bytes, biased towards the ones the model
// nearly accepts: names and datatypes mostly from its signature, small
// dimensions, small values, data sized for the shape give or take one.
class RequestBuilder {
 public:
  RequestBuilder(const uint8_t* data, size_t size, const models::Model& model)
      : provider_(data, size), model_(model) {}

  inference::ModelInferRequest Build() {
    inference::ModelInferRequest request;
    request.set_model_name("bert");
    request.set_id(provider_.ConsumeRandomLengthString(8));
    const bool raw = provider_.ConsumeBool();
    const int input_count = provider_.ConsumeIntegralInRange(0, 4);
    for (int i = 0; i < input_count; ++i) AddInput(request, raw);
    const int output_count = provider_.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < output_count; ++i) {
      request.add_outputs()->set_name(PickName(model_.outputs()));
    }
    return request;
  }

 private:
  std::string PickName(const std::vector<models::TensorSpec>& specs) {
    const size_t index = provider_.ConsumeIntegralInRange<size_t>(
        0, specs.size());  // One past the end: any name.
    if (index < specs.size()) return specs[index].name;
    return provider_.ConsumeRandomLengthString(16);
  }

  std::string PickDatatype() {
    switch (provider_.ConsumeIntegralInRange(0, 3)) {
      case 0:
      case 1:
        return "INT64";  // Every BERT input's.
      case 2:
        return provider_.PickValueInArray(kWireDatatypes);
      default:
        return provider_.ConsumeRandomLengthString(8);
    }
  }

  // Mostly small; sometimes a power of two (sizes near the limits) or any
  // value at all.
  int64_t PickDimension() {
    switch (provider_.ConsumeIntegralInRange(0, 15)) {
      case 0:
        return provider_.ConsumeIntegral<int64_t>();
      case 1:
        return int64_t{1} << provider_.ConsumeIntegralInRange(0, 62);
      default:
        return provider_.ConsumeIntegralInRange<int64_t>(0, 9);
    }
  }

  int64_t PickValue(bool small) {
    if (small) return provider_.ConsumeIntegralInRange<int64_t>(-1, 256);
    return provider_.ConsumeIntegral<int64_t>();
  }

  // The element count of `input`'s shape give or take one, within
  // [0, kMaxBuiltElements].
  int64_t PickElementCount(const InputTensor& input) {
    int64_t count = 1;
    for (int64_t dim : input.shape()) {
      if (dim < 0 || __builtin_mul_overflow(count, dim, &count) ||
          count > kMaxBuiltElements) {
        return provider_.ConsumeIntegralInRange<int64_t>(0, 16);
      }
    }
    switch (provider_.ConsumeIntegralInRange(0, 7)) {
      case 0:
        return count > 0 ? count - 1 : 0;
      case 1:
        return count + 1;
      default:
        return count;
    }
  }

  void AddInput(inference::ModelInferRequest& request, bool raw) {
    InputTensor* input = request.add_inputs();
    // Sometimes the text input (server/servables/text_input.h), mostly as
    // BYTES.
    const bool text = provider_.ConsumeIntegralInRange(0, 3) == 0;
    input->set_name(text ? "text" : PickName(model_.inputs()));
    input->set_datatype(text && provider_.ConsumeBool() ? "BYTES"
                                                        : PickDatatype());
    const int rank = provider_.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < rank; ++i) input->add_shape(PickDimension());
    const int64_t count = PickElementCount(*input);
    const bool small = provider_.ConsumeIntegralInRange(0, 3) != 0;
    if (input->datatype() == "BYTES") {
      AddStrings(request, *input, count, raw);
    } else if (raw) {
      AddRawContents(request, *input, count, small);
    } else {
      AddTypedContents(*input, count, small);
    }
  }

  // Little-endian values cut to the datatype's size (one byte for
  // datatypes LibTorch cannot hold), sometimes a byte short or long.
  void AddRawContents(inference::ModelInferRequest& request,
                      const InputTensor& input, int64_t count, bool small) {
    absl::StatusOr<at::ScalarType> dtype =
        ScalarTypeFromDatatype(input.datatype());
    const size_t element_bytes = dtype.ok() ? at::elementSize(*dtype) : 1;
    std::string* bytes = request.add_raw_input_contents();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t value = PickValue(small);
      char element[sizeof(value)];
      std::memcpy(element, &value, sizeof(value));
      bytes->append(element, element_bytes);
    }
    switch (provider_.ConsumeIntegralInRange(0, 15)) {
      case 0:
        if (!bytes->empty()) bytes->pop_back();
        break;
      case 1:
        bytes->push_back('\0');
        break;
      default:
        break;
    }
  }

  // BYTES elements: short strings of words (any bytes, UTF-8 or not), raw
  // (4-byte little-endian lengths, sometimes cut or lying) or typed.
  void AddStrings(inference::ModelInferRequest& request, InputTensor& input,
                  int64_t count, bool raw) {
    std::string* bytes = raw ? request.add_raw_input_contents() : nullptr;
    for (int64_t i = 0; i < count; ++i) {
      const std::string element = provider_.ConsumeRandomLengthString(48);
      if (!raw) {
        input.mutable_contents()->add_bytes_contents(element);
        continue;
      }
      uint32_t length = static_cast<uint32_t>(element.size());
      if (provider_.ConsumeIntegralInRange(0, 15) == 0) {
        length = provider_.ConsumeIntegral<uint32_t>();
      }
      char prefix[4];
      std::memcpy(prefix, &length, 4);
      bytes->append(prefix, 4);
      bytes->append(element);
    }
    if (raw && !bytes->empty() &&
        provider_.ConsumeIntegralInRange(0, 15) == 0) {
      bytes->pop_back();
    }
  }

  // Mostly int64_contents (BERT's), else any of the typed fields.
  void AddTypedContents(InputTensor& input, int64_t count, bool small) {
    inference::InferTensorContents* contents = input.mutable_contents();
    const int field =
        provider_.ConsumeBool() ? 2 : provider_.ConsumeIntegralInRange(0, 7);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t value = PickValue(small);
      switch (field) {
        case 0:
          contents->add_bool_contents(value != 0);
          break;
        case 1:
          contents->add_int_contents(static_cast<int32_t>(value));
          break;
        case 2:
          contents->add_int64_contents(value);
          break;
        case 3:
          contents->add_uint_contents(static_cast<uint32_t>(value));
          break;
        case 4:
          contents->add_uint64_contents(static_cast<uint64_t>(value));
          break;
        case 5:
          contents->add_fp32_contents(static_cast<float>(value));
          break;
        case 6:
          contents->add_fp64_contents(static_cast<double>(value));
          break;
        default:
          contents->add_bytes_contents(std::to_string(value));
          break;
      }
    }
  }

  FuzzedDataProvider provider_;
  const models::Model& model_;
};

// The response of a successful forward: one output entry and one raw entry
// per output, each as long as its shape and datatype say.
void CheckResponse(const inference::ModelInferResponse& response) {
  const bool paired =
      response.outputs_size() == response.raw_output_contents_size();
  TrapUnless(paired, absl::InternalError("outputs and raw contents differ"),
             "one raw_output_contents entry per output");
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    absl::StatusOr<at::ScalarType> dtype =
        ScalarTypeFromDatatype(output.datatype());
    TrapUnless(dtype.ok(), dtype.status(), "outputs carry wire datatypes");
    size_t bytes = at::elementSize(*dtype);
    for (int64_t dim : output.shape()) bytes *= static_cast<size_t>(dim);
    TrapUnless(bytes == response.raw_output_contents(i).size(),
               absl::InternalError(output.name()),
               "raw output sized for its shape");
  }
}

// A text input for the BERT fixture: FakeTokenizer's word ids (length + 10)
// stay inside its vocabulary for the builder's strings of at most 48 bytes.
const TextInput& FixtureText(const models::Model& model) {
  static const TextInput* const text =
      TextInput::Create(std::make_shared<test_util::FakeTokenizer>(),
                        model.inputs(), model.max_sequence_length().value_or(0))
          .value()
          .release();
  return *text;
}

void RunRequest(const models::Model& model,
                const inference::ModelInferRequest& request,
                int64_t max_batch_size) {
  // The served model's one validation of a wire request.
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(request, model.inputs(), model.outputs(), max_batch_size,
                    &FixtureText(model));
  TrapUnless(decoded.ok() || absl::IsInvalidArgument(decoded.status()),
             decoded.status(), "a request is refused as INVALID_ARGUMENT");
  if (!decoded.ok()) return;
  std::optional<models::NamedTensors> outputs =
      ForwardIfSmall(model, decoded->inputs);
  if (!outputs.has_value()) return;
  inference::ModelInferResponse response;
  absl::Status written =
      FillResponse(request, model.outputs(), decoded->requested_outputs,
                   *outputs, &response);
  TrapUnless(written.ok(), written, "a forward's outputs fill a response");
  CheckResponse(response);
}

}  // namespace
}  // namespace castserve::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Parsing logs every string field that is not UTF-8: millions of lines.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = castserve::fuzz;
  if (size == 0) return 0;
  const castserve::models::Model& model = fuzz::BertFixture();
  const int64_t max_batch_size = (data[0] & 2) != 0 ? 8 : 0;
  inference::ModelInferRequest request;
  if ((data[0] & 1) != 0) {
    request = fuzz::RequestBuilder(data + 1, size - 1, model).Build();
  } else if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) {
    return 0;
  }
  fuzz::RunRequest(model, request, max_batch_size);
  return 0;
}
