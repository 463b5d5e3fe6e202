#include "server/servables/tensor_conversion.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/servables/text_input.h"
#include "server/test_util/fake_tokenizer.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<models::TensorSpec> BertSpecs() {
  return {{"input_ids", at::kLong, {-1, -1}},
          {"attention_mask", at::kLong, {-1, -1}, /*optional=*/true}};
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

inference::ModelInferRequest::InferInputTensor* AddInput(
    inference::ModelInferRequest& request, const std::string& name,
    const std::string& datatype, std::vector<int64_t> shape) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
  return input;
}

inference::ModelInferRequest RawIds(std::vector<int64_t> shape,
                                    const std::vector<int64_t>& ids) {
  inference::ModelInferRequest request;
  request.set_model_name("bert");
  AddInput(request, "input_ids", "INT64", shape);
  request.add_raw_input_contents(Bytes(ids));
  return request;
}

void ExpectInvalid(const absl::StatusOr<models::NamedTensors>& result,
                   const std::string& substring) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(substring));
}

TEST(TensorConversionTest, RawInt64BecomesRowMajorTensor) {
  auto result = InputsFromRequest(RawIds({2, 3}, {1, 2, 3, 4, 5, 6}),
                                  BertSpecs(), /*max_batch_size=*/8);
  ASSERT_TRUE(result.ok()) << result.status();
  const at::Tensor& ids = result->at("input_ids");
  EXPECT_EQ(ids.scalar_type(), at::kLong);
  EXPECT_THAT(ids.sizes().vec(), ElementsAre(2, 3));
  EXPECT_EQ(ids[1][0].item<int64_t>(), 4);
  EXPECT_EQ(result->count("attention_mask"), 0u);
}

TEST(TensorConversionTest, TypedContentsOfEveryTypedDatatype) {
  std::vector<models::TensorSpec> specs = {
      {"b", at::kBool, {2}},    {"u8", at::kByte, {2}},
      {"i8", at::kChar, {2}},   {"i16", at::kShort, {2}},
      {"i32", at::kInt, {2}},   {"i64", at::kLong, {2}},
      {"f32", at::kFloat, {2}}, {"f64", at::kDouble, {2}}};
  inference::ModelInferRequest request;
  auto* c = AddInput(request, "b", "BOOL", {2})->mutable_contents();
  c->add_bool_contents(true);
  c->add_bool_contents(false);
  c = AddInput(request, "u8", "UINT8", {2})->mutable_contents();
  c->add_uint_contents(255);
  c->add_uint_contents(1);
  c = AddInput(request, "i8", "INT8", {2})->mutable_contents();
  c->add_int_contents(-128);
  c->add_int_contents(1);
  c = AddInput(request, "i16", "INT16", {2})->mutable_contents();
  c->add_int_contents(-300);
  c->add_int_contents(1);
  c = AddInput(request, "i32", "INT32", {2})->mutable_contents();
  c->add_int_contents(-70000);
  c->add_int_contents(1);
  c = AddInput(request, "i64", "INT64", {2})->mutable_contents();
  c->add_int64_contents(int64_t{1} << 40);
  c->add_int64_contents(1);
  c = AddInput(request, "f32", "FP32", {2})->mutable_contents();
  c->add_fp32_contents(1.5f);
  c->add_fp32_contents(1);
  c = AddInput(request, "f64", "FP64", {2})->mutable_contents();
  c->add_fp64_contents(-2.25);
  c->add_fp64_contents(1);
  auto result = InputsFromRequest(request, specs, 0);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->at("b")[0].item<bool>());
  EXPECT_EQ(result->at("u8")[0].item<uint8_t>(), 255);
  EXPECT_EQ(result->at("i8")[0].item<int8_t>(), -128);
  EXPECT_EQ(result->at("i16")[0].item<int16_t>(), -300);
  EXPECT_EQ(result->at("i32")[0].item<int32_t>(), -70000);
  EXPECT_EQ(result->at("i64")[0].item<int64_t>(), int64_t{1} << 40);
  EXPECT_EQ(result->at("f32")[0].item<float>(), 1.5f);
  EXPECT_EQ(result->at("f64")[0].item<double>(), -2.25);
}

TEST(TensorConversionTest, RawHalfAndBFloat16) {
  std::vector<models::TensorSpec> specs = {{"h", at::kHalf, {2}},
                                           {"bf", at::kBFloat16, {2}}};
  at::Tensor h = at::tensor({1.5f, -2.0f}).to(at::kHalf);
  at::Tensor bf = at::tensor({3.0f, 0.5f}).to(at::kBFloat16);
  inference::ModelInferRequest request;
  AddInput(request, "h", "FP16", {2});
  AddInput(request, "bf", "BF16", {2});
  request.add_raw_input_contents(
      std::string(static_cast<const char*>(h.data_ptr()), 4));
  request.add_raw_input_contents(
      std::string(static_cast<const char*>(bf.data_ptr()), 4));
  auto result = InputsFromRequest(request, specs, 0);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(at::equal(result->at("h"), h));
  EXPECT_TRUE(at::equal(result->at("bf"), bf));
}

TEST(TensorConversionTest, HalfAsTypedContentsIsRejected) {
  inference::ModelInferRequest request;
  AddInput(request, "h", "FP16", {1})->mutable_contents()->add_fp32_contents(1);
  ExpectInvalid(InputsFromRequest(request, {{"h", at::kHalf, {1}}}, 0),
                "FP16 data must be sent in raw_input_contents");
}

TEST(TensorConversionTest, UnknownInputNamesTheExpectedOnes) {
  inference::ModelInferRequest request = RawIds({1, 1}, {1});
  request.mutable_inputs(0)->set_name("ids");
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "unknown input 'ids'; the model's inputs are 'input_ids'");
}

TEST(TensorConversionTest, MissingRequiredInput) {
  inference::ModelInferRequest request;
  AddInput(request, "attention_mask", "INT64", {1, 1})
      ->mutable_contents()
      ->add_int64_contents(1);
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "missing input 'input_ids'");
}

TEST(TensorConversionTest, DuplicateInput) {
  inference::ModelInferRequest request = RawIds({1, 1}, {1});
  AddInput(request, "input_ids", "INT64", {1, 1});
  request.add_raw_input_contents(Bytes(std::vector<int64_t>{1}));
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8), "given twice");
}

TEST(TensorConversionTest, WrongDatatype) {
  inference::ModelInferRequest request = RawIds({1, 2}, {1, 2});
  request.mutable_inputs(0)->set_datatype("FP32");
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "input 'input_ids': datatype FP32, expected INT64");
}

TEST(TensorConversionTest, UnknownAndUnsupportedDatatypes) {
  inference::ModelInferRequest request = RawIds({1, 2}, {1, 2});
  request.mutable_inputs(0)->set_datatype("int64");
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "unknown datatype 'int64'");
  request.mutable_inputs(0)->set_datatype("UINT64");
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "datatype UINT64 is not supported");
  EXPECT_FALSE(ScalarTypeFromDatatype("UINT32").ok());
  EXPECT_FALSE(ScalarTypeFromDatatype("BYTES").ok());
}

TEST(TensorConversionTest, WrongRank) {
  ExpectInvalid(InputsFromRequest(RawIds({2}, {1, 2}), BertSpecs(), 8),
                "has rank 1, expected rank 2");
}

TEST(TensorConversionTest, WrongFixedDimension) {
  std::vector<models::TensorSpec> specs = {{"pixels", at::kFloat, {-1, 3, 2}}};
  inference::ModelInferRequest request;
  AddInput(request, "pixels", "FP32", {1, 4, 2});
  request.add_raw_input_contents(Bytes(std::vector<float>(8)));
  ExpectInvalid(InputsFromRequest(request, specs, 4),
                "dimension 1 is 4, expected 3");
}

TEST(TensorConversionTest, NegativeDimension) {
  ExpectInvalid(InputsFromRequest(RawIds({1, -2}, {}), BertSpecs(), 8),
                "dimension 1 is -2");
}

TEST(TensorConversionTest, RawByteSizeMustMatchShape) {
  ExpectInvalid(InputsFromRequest(RawIds({1, 3}, {1, 2}), BertSpecs(), 8),
                "raw data has 16 bytes; shape [1,3] of INT64 needs 24");
}

TEST(TensorConversionTest, TypedElementCountMustMatchShape) {
  inference::ModelInferRequest request;
  auto* contents =
      AddInput(request, "input_ids", "INT64", {1, 3})->mutable_contents();
  contents->add_int64_contents(1);
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "int64_contents has 1 elements; shape [1,3] needs 3");
}

// Found by server/fuzz/infer_request_fuzzer: a shape of 2^49 INT64
// elements (4 PiB, more than any address space holds) with a few bytes of
// data. The data is checked against the shape before the tensor is
// allocated, so this is the caller's error, not an out-of-memory one.
TEST(TensorConversionTest, DataIsCheckedAgainstTheShapeBeforeAllocating) {
  constexpr int64_t kHuge = int64_t{1} << 49;
  ExpectInvalid(InputsFromRequest(RawIds({1, kHuge}, {1}), BertSpecs(), 8),
                "raw data has 8 bytes; shape [1,562949953421312] of INT64 "
                "needs 4503599627370496");
  inference::ModelInferRequest typed;
  AddInput(typed, "input_ids", "INT64", {1, kHuge})
      ->mutable_contents()
      ->add_int64_contents(1);
  ExpectInvalid(InputsFromRequest(typed, BertSpecs(), 8),
                "int64_contents has 1 elements; shape [1,562949953421312]");
  inference::ModelInferRequest half;
  AddInput(half, "input_ids", "FP16", {1, kHuge});
  ExpectInvalid(
      InputsFromRequest(half, {{"input_ids", at::kHalf, {-1, -1}}}, 8),
      "FP16 data must be sent in raw_input_contents");
}

TEST(TensorConversionTest, TypedContentsInTheWrongField) {
  inference::ModelInferRequest request;
  AddInput(request, "input_ids", "INT64", {1, 1})
      ->mutable_contents()
      ->add_int_contents(1);
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "INT64 data belongs in int64_contents, not int_contents");
}

TEST(TensorConversionTest, TypedValueOutOfRange) {
  inference::ModelInferRequest request;
  AddInput(request, "x", "INT8", {1})
      ->mutable_contents()
      ->add_int_contents(200);
  ExpectInvalid(InputsFromRequest(request, {{"x", at::kChar, {1}}}, 0),
                "out of range for INT8");
}

TEST(TensorConversionTest, BatchAboveMaxBatchSize) {
  ExpectInvalid(InputsFromRequest(RawIds({9, 1}, std::vector<int64_t>(9)),
                                  BertSpecs(), 8),
                "batch size 9 exceeds max_batch_size 8");
}

TEST(TensorConversionTest, BatchSizesMustAgree) {
  inference::ModelInferRequest request = RawIds({2, 1}, {1, 2});
  AddInput(request, "attention_mask", "INT64", {1, 1});
  request.add_raw_input_contents(Bytes(std::vector<int64_t>{1}));
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "batch size 1 differs from input 'input_ids'");
}

TEST(TensorConversionTest, MixedRawAndTypedIsRejected) {
  inference::ModelInferRequest request = RawIds({1, 1}, {1});
  AddInput(request, "attention_mask", "INT64", {1, 1})
      ->mutable_contents()
      ->add_int64_contents(1);
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "send all inputs raw or all typed");
}

TEST(TensorConversionTest, RawEntryCountMustMatchInputs) {
  inference::ModelInferRequest request = RawIds({1, 1}, {1});
  request.add_raw_input_contents("x");
  ExpectInvalid(InputsFromRequest(request, BertSpecs(), 8),
                "raw_input_contents has 2 entries for 1 inputs");
}

TEST(TensorConversionTest, BoolIsOneByteZeroOrOne) {
  std::vector<models::TensorSpec> specs = {{"b", at::kBool, {2}}};
  inference::ModelInferRequest request;
  AddInput(request, "b", "BOOL", {2});
  request.add_raw_input_contents(std::string("\x01\x00", 2));
  auto ok = InputsFromRequest(request, specs, 0);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->at("b")[0].item<bool>());
  EXPECT_FALSE(ok->at("b")[1].item<bool>());
  request.set_raw_input_contents(0, std::string("\x02\x00", 2));
  ExpectInvalid(InputsFromRequest(request, specs, 0), "not 0 or 1");
}

TEST(TensorConversionTest, RequestedOutputsFilterAndValidate) {
  std::vector<models::TensorSpec> outputs = {
      {"last_hidden_state", at::kFloat, {-1, -1, 4}},
      {"pooler_output", at::kFloat, {-1, 4}}};
  inference::ModelInferRequest request;
  request.add_outputs()->set_name("pooler_output");
  auto names = RequestedOutputs(request, outputs);
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, ElementsAre("pooler_output"));
  request.add_outputs()->set_name("logits");
  auto unknown = RequestedOutputs(request, outputs);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("unknown output 'logits'"));
}

TEST(TensorConversionTest, ResponseCarriesRawOutputsAndId) {
  std::vector<models::TensorSpec> specs = {{"a", at::kFloat, {-1, 2}},
                                           {"b", at::kLong, {-1}}};
  models::NamedTensors outputs = {
      {"a", at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2}).t()},
      {"b", at::tensor({int64_t{7}})}};
  inference::ModelInferRequest request;
  request.set_model_name("m");
  request.set_id("req-1");
  inference::ModelInferResponse response;
  ASSERT_TRUE(FillResponse(request, specs, {}, outputs, &response).ok());
  EXPECT_EQ(response.id(), "req-1");
  EXPECT_EQ(response.model_name(), "m");
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "a");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  // The transposed (non-contiguous) tensor travels row-major.
  std::vector<float> a(4);
  ASSERT_EQ(response.raw_output_contents(0).size(), 16u);
  std::memcpy(a.data(), response.raw_output_contents(0).data(), 16);
  EXPECT_THAT(a, ElementsAre(1, 3, 2, 4));
  EXPECT_EQ(response.outputs(1).datatype(), "INT64");

  inference::ModelInferResponse filtered;
  ASSERT_TRUE(FillResponse(request, specs, {"b"}, outputs, &filtered).ok());
  ASSERT_EQ(filtered.outputs_size(), 1);
  EXPECT_EQ(filtered.outputs(0).name(), "b");
  EXPECT_EQ(filtered.raw_output_contents_size(), 1);
}

TEST(TensorConversionTest, DatatypeNamesRoundTrip) {
  for (const char* name : {"BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64",
                           "FP16", "FP32", "FP64", "BF16"}) {
    auto dtype = ScalarTypeFromDatatype(name);
    ASSERT_TRUE(dtype.ok()) << name;
    EXPECT_EQ(DatatypeName(*dtype).value(), name);
    EXPECT_NE(ConfigDataType(*dtype), inference::TYPE_INVALID);
  }
  EXPECT_EQ(ConfigDataType(at::kBFloat16), inference::TYPE_BF16);
}

TEST(TensorConversionTest, DecodeRequestIsTheWholeRequestCheck) {
  const std::vector<models::TensorSpec> outputs = {
      {"last_hidden_state", at::kFloat, {-1, -1, 4}}};
  inference::ModelInferRequest request = RawIds({2, 3}, {1, 2, 3, 4, 5, 6});
  request.add_outputs()->set_name("last_hidden_state");
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(request, BertSpecs(), outputs, 8);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->batch_size, 2);
  EXPECT_EQ(decoded->requested_outputs,
            std::vector<std::string>({"last_hidden_state"}));
  EXPECT_EQ(decoded->inputs.at("input_ids").size(1), 3);
  // Without batching the batch size is 1 whatever the shape.
  inference::ModelInferRequest flat = RawIds({2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<models::TensorSpec> flat_specs = {
      {"input_ids", at::kLong, {2, 3}}};
  EXPECT_EQ(DecodeRequest(flat, flat_specs, outputs, 0)->batch_size, 1);
  // Outputs are checked against the output signature, inputs against the
  // input one.
  request.mutable_outputs(0)->set_name("input_ids");
  EXPECT_EQ(DecodeRequest(request, BertSpecs(), outputs, 8).status().message(),
            "unknown output 'input_ids'; the model's outputs are "
            "'last_hidden_state'");
  EXPECT_EQ(DecodeRequest(RawIds({9, 1}, std::vector<int64_t>(9)), BertSpecs(),
                          outputs, 8)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorConversionTest, WireSpecsNameEachDtype) {
  const std::vector<TensorSpec> wire = WireSpecs(BertSpecs());
  ASSERT_EQ(wire.size(), BertSpecs().size());
  EXPECT_EQ(wire[0].name, "input_ids");
  EXPECT_EQ(wire[0].datatype, "INT64");
  EXPECT_EQ(wire[0].shape, BertSpecs()[0].shape);
  EXPECT_EQ(wire[1].optional, BertSpecs()[1].optional);
}

// --- The text input
// -----------------------------------------------------------

// BYTES raw contents: each string as a 4-byte little-endian length, then it.
std::string RawStrings(const std::vector<std::string>& strings) {
  std::string raw;
  for (const std::string& s : strings) {
    const uint32_t length = static_cast<uint32_t>(s.size());
    raw.append(reinterpret_cast<const char*>(&length), 4);
    raw += s;
  }
  return raw;
}

inference::ModelInferRequest TextRequest(const std::vector<std::string>& texts,
                                         std::vector<int64_t> shape = {}) {
  inference::ModelInferRequest request;
  if (shape.empty()) shape = {static_cast<int64_t>(texts.size()), 1};
  AddInput(request, "text", "BYTES", shape);
  request.add_raw_input_contents(RawStrings(texts));
  return request;
}

std::unique_ptr<TextInput> FakeText() {
  return TextInput::Create(std::make_shared<test_util::FakeTokenizer>(),
                           BertSpecs(), /*max_length=*/16)
      .value();
}

const std::vector<models::TensorSpec> kOutputs = {
    {"last_hidden_state", at::kFloat, {-1, -1, 4}}};

absl::StatusOr<models::NamedTensors> DecodeText(
    const inference::ModelInferRequest& request, const TextInput* text,
    int64_t max_batch_size = 8) {
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(request, BertSpecs(), kOutputs, max_batch_size, text);
  if (!decoded.ok()) return decoded.status();
  return decoded->inputs;
}

TEST(TensorConversionTest, TextBecomesPaddedTokenInputs) {
  std::unique_ptr<TextInput> text = FakeText();
  absl::StatusOr<DecodedRequest> decoded = DecodeRequest(
      TextRequest({"a bb", "ccc"}), BertSpecs(), kOutputs, 8, text.get());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->batch_size, 2);
  const at::Tensor& ids = decoded->inputs.at("input_ids");
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(ids[1][3].item<int64_t>(), 0);  // Padding.
  EXPECT_EQ(decoded->inputs.at("attention_mask").sum().item<int64_t>(), 7);
}

TEST(TensorConversionTest, TextShapesBatchByOneOrFlatAndTypedContents) {
  std::unique_ptr<TextInput> text = FakeText();
  EXPECT_TRUE(DecodeText(TextRequest({"a", "b"}, {2}), text.get()).ok());
  inference::ModelInferRequest typed;
  auto* input = AddInput(typed, "text", "BYTES", {2, 1});
  input->mutable_contents()->add_bytes_contents("a b");
  input->mutable_contents()->add_bytes_contents("c");
  absl::StatusOr<models::NamedTensors> tensors = DecodeText(typed, text.get());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->at("input_ids").size(1), 4);
}

TEST(TensorConversionTest, TextRequestsThatAreWrongSayWhy) {
  std::unique_ptr<TextInput> text = FakeText();
  ExpectInvalid(DecodeText(TextRequest({"a", "b"}, {1, 2}), text.get()),
                "input 'text': shape [1,2]; expected [batch, 1] (or [batch])");
  ExpectInvalid(DecodeText(TextRequest({}, {0, 1}), text.get()),
                "input 'text': shape [0,1] holds no string");
  ExpectInvalid(
      DecodeText(TextRequest(std::vector<std::string>(9, "a")), text.get()),
      "input 'text': batch size 9 exceeds max_batch_size 8");
  inference::ModelInferRequest wrong_type = TextRequest({"a"});
  wrong_type.mutable_inputs(0)->set_datatype("INT64");
  ExpectInvalid(DecodeText(wrong_type, text.get()),
                "input 'text': datatype INT64, expected BYTES");
  ExpectInvalid(DecodeText(TextRequest({"ok", "bad \xFF"}), text.get()),
                "input 'text': element 1: not valid UTF-8");
  ExpectInvalid(
      DecodeText(TextRequest({std::string(kMaxTextBytes + 1, 'a')}),
                 text.get()),
      "input 'text': element 0 has 1048577 bytes, above the limit of 1048576");
}

TEST(TensorConversionTest, MalformedRawStringsAreRefused) {
  std::unique_ptr<TextInput> text = FakeText();
  inference::ModelInferRequest request = TextRequest({"abc", "de"});
  std::string& raw = *request.mutable_raw_input_contents(0);
  const std::string whole = raw;
  raw = whole.substr(0, 9);
  ExpectInvalid(DecodeText(request, text.get()),
                "raw data ends before the length of element 1");
  raw = whole.substr(0, whole.size() - 1);
  ExpectInvalid(DecodeText(request, text.get()),
                "raw data ends inside element 1 (2 bytes announced, 1 left)");
  raw = whole + "x";
  ExpectInvalid(DecodeText(request, text.get()),
                "raw data has 1 bytes after its 2 elements");
  // A length that claims 4 GiB is refused before anything is read.
  raw = std::string("\xFF\xFF\xFF\xFF", 4);
  request.mutable_inputs(0)->mutable_shape()->Set(0, 1);
  ExpectInvalid(DecodeText(request, text.get()),
                "element 0 has 4294967295 bytes, above the limit");
}

TEST(TensorConversionTest, TextOrTokensNeverBothNorNeither) {
  std::unique_ptr<TextInput> text = FakeText();
  inference::ModelInferRequest both = TextRequest({"a"});
  AddInput(both, "input_ids", "INT64", {1, 1});
  both.add_raw_input_contents(Bytes(std::vector<int64_t>{5}));
  ExpectInvalid(DecodeText(both, text.get()),
                "input 'text': a request sends either text or the token "
                "inputs, not both (it also has 'input_ids')");
  ExpectInvalid(DecodeText(inference::ModelInferRequest(), text.get()),
                "the request has no input: send 'text' (one string per batch "
                "element) or the token inputs 'input_ids', "
                "'attention_mask'");
  // Token inputs keep working next to a tokenizer.
  EXPECT_TRUE(DecodeText(RawIds({1, 2}, {3, 4}), text.get()).ok());
}

// An image-text model's signature: every input optional.
std::vector<models::TensorSpec> ImageTextSpecs() {
  return {{"pixel_values", at::kFloat, {-1, 2}, /*optional=*/true},
          {"input_ids", at::kLong, {-1, -1}, /*optional=*/true},
          {"attention_mask", at::kLong, {-1, -1}, /*optional=*/true}};
}

TEST(TensorConversionTest, TextBesideInputsItDoesNotFillSharesTheBatch) {
  std::unique_ptr<TextInput> text = FakeText();
  auto decode = [&](const inference::ModelInferRequest& request) {
    return DecodeRequest(request, ImageTextSpecs(), kOutputs, 8, text.get());
  };
  // The image first: the text is not input 0.
  inference::ModelInferRequest request;
  AddInput(request, "pixel_values", "FP32", {2, 2});
  request.add_raw_input_contents(Bytes(std::vector<float>{1, 2, 3, 4}));
  AddInput(request, "text", "BYTES", {2, 1});
  request.add_raw_input_contents(RawStrings({"a bb", "ccc"}));
  absl::StatusOr<DecodedRequest> decoded = decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->batch_size, 2);
  EXPECT_EQ(decoded->inputs.at("input_ids").sizes(),
            (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(decoded->inputs.at("attention_mask").sum().item<int64_t>(), 7);
  EXPECT_EQ(decoded->inputs.at("pixel_values")[1][1].item<float>(), 4);
  inference::ModelInferRequest three = request;
  three.mutable_inputs(0)->mutable_shape()->Set(0, 3);
  three.set_raw_input_contents(0, Bytes(std::vector<float>(6, 1)));
  ExpectInvalid(decode(three).status(),
                "inputs 'text' and 'pixel_values' have 2 and 3 batch "
                "elements");
  inference::ModelInferRequest unknown = TextRequest({"a"});
  AddInput(unknown, "pixels", "FP32", {1, 2});
  unknown.add_raw_input_contents(Bytes(std::vector<float>{1, 2}));
  ExpectInvalid(decode(unknown).status(), "'pixels'");
  // A model whose only other inputs are the token inputs takes no more.
  ExpectInvalid(DecodeText(unknown, text.get()), "'pixels'");
}

TEST(TensorConversionTest, TextWithoutTokenizerNamesTheReason) {
  ExpectInvalid(DecodeText(TextRequest({"a"}), nullptr),
                "input 'text': the model folder has no tokenizer");
  std::unique_ptr<TextInput> none = TextInput::Unavailable(
      "input 'text': the model folder /m has no tokenizer");
  ExpectInvalid(DecodeText(TextRequest({"a"}), none.get()),
                "input 'text': the model folder /m has no tokenizer");
}

}  // namespace
}  // namespace castserve
