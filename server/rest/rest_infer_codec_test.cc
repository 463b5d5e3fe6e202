#include "server/rest/rest_infer_codec.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

absl::StatusOr<RestInferRequest> Decode(
    const std::string& body, std::optional<uint64_t> header_length = {}) {
  return DecodeRestInferRequest(body, header_length, "m", "");
}

// The raw contents one JSON input decodes to.
std::string RawOf(const std::string& datatype, const std::string& shape,
                  const std::string& data) {
  absl::StatusOr<RestInferRequest> decoded =
      Decode(R"({"inputs":[{"name":"x","datatype":")" + datatype +
             R"(","shape":)" + shape + R"(,"data":)" + data + "}]}");
  EXPECT_TRUE(decoded.ok()) << datatype << ": " << decoded.status();
  if (!decoded.ok()) return "";
  EXPECT_EQ(decoded->request.raw_input_contents_size(), 1);
  return decoded->request.raw_input_contents(0);
}

absl::Status DecodeError(const std::string& body,
                         std::optional<uint64_t> header_length = {}) {
  absl::StatusOr<RestInferRequest> decoded = Decode(body, header_length);
  return decoded.ok() ? absl::OkStatus() : decoded.status();
}

TEST(RestInferCodecTest, EveryDatatypeFromJson) {
  EXPECT_EQ(RawOf("BOOL", "[3]", "[true,false,true]"),
            std::string("\x01\x00\x01", 3));
  EXPECT_EQ(RawOf("UINT8", "[2]", "[0,255]"), Bytes<uint8_t>({0, 255}));
  EXPECT_EQ(RawOf("UINT16", "[1]", "[65535]"), Bytes<uint16_t>({65535}));
  EXPECT_EQ(RawOf("UINT32", "[1]", "[4294967295]"),
            Bytes<uint32_t>({4294967295u}));
  EXPECT_EQ(RawOf("UINT64", "[1]", "[18446744073709551615]"),
            Bytes<uint64_t>({18446744073709551615ull}));
  EXPECT_EQ(RawOf("INT8", "[2]", "[-128,127]"), Bytes<int8_t>({-128, 127}));
  EXPECT_EQ(RawOf("INT16", "[1]", "[-32768]"), Bytes<int16_t>({-32768}));
  EXPECT_EQ(RawOf("INT32", "[2]", "[-1,7]"), Bytes<int32_t>({-1, 7}));
  EXPECT_EQ(RawOf("INT64", "[2]", "[-9223372036854775808,5]"),
            Bytes<int64_t>({INT64_MIN, 5}));
  EXPECT_EQ(RawOf("FP32", "[2]", "[1.5,-2]"), Bytes<float>({1.5f, -2.0f}));
  EXPECT_EQ(RawOf("FP64", "[1]", "[0.1]"), Bytes<double>({0.1}));
  // 1.5 in binary16 is 0x3E00, in bfloat16 0x3FC0.
  EXPECT_EQ(RawOf("FP16", "[1]", "[1.5]"), Bytes<uint16_t>({0x3E00}));
  EXPECT_EQ(RawOf("BF16", "[1]", "[1.5]"), Bytes<uint16_t>({0x3FC0}));
  EXPECT_EQ(RawOf("BYTES", "[2]", R"(["ab",""])"),
            std::string("\x02\0\0\0ab\0\0\0\0", 10));
}

TEST(RestInferCodecTest, NestedDataIsFlattenedRowMajor) {
  EXPECT_EQ(RawOf("INT32", "[2,2]", "[[1,2],[3,4]]"),
            Bytes<int32_t>({1, 2, 3, 4}));
}

TEST(RestInferCodecTest, ElementsOutOfRangeOrOfTheWrongKindAreRefused) {
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"UINT8",
      "shape":[1],"data":[256]}]})")
                  .message(),
              HasSubstr("256 is out of range for UINT8"));
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"UINT32",
      "shape":[1],"data":[-1]}]})")
                  .message(),
              HasSubstr("out of range"));
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"INT64",
      "shape":[1],"data":[1.5]}]})")
                  .message(),
              HasSubstr("INT64 data must be integers, got a number"));
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"BOOL",
      "shape":[1],"data":[1]}]})")
                  .message(),
              HasSubstr("must be booleans"));
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"BYTES",
      "shape":[1],"data":[7]}]})")
                  .message(),
              HasSubstr("must be strings"));
  EXPECT_THAT(DecodeError(R"({"inputs":[{"name":"x","datatype":"FP99",
      "shape":[1],"data":[7]}]})")
                  .message(),
              HasSubstr("FP99"));
}

TEST(RestInferCodecTest, MalformedBodiesAreInvalidArgument) {
  for (const char* body :
       {"", "{", "[]", "null", R"({"inputs":{}})", R"({"id":5,"inputs":[]})",
        R"({"inputs":[5]})", R"({"inputs":[{"datatype":"FP32"}]})",
        R"({"inputs":[{"name":"x","datatype":"FP32","data":[1]}]})",
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":"1"}]})",
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1.5],
           "data":[1]}]})",
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]})",
        R"({"inputs":[],"outputs":[{"parameters":{}}]})",
        R"({"inputs":[],"parameters":{"a":[1]}})",
        R"({"inputs":[],"parameters":{"binary_data_output":1}})",
        R"({"inputs":[],"a":1,"a":2})"}) {
    absl::Status status = DecodeError(body);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << body;
  }
}

TEST(RestInferCodecTest, DepthBombIsRefusedBeforeItIsBuilt) {
  const std::string bomb =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":)" +
      std::string(100000, '[') + "1" + std::string(100000, ']') + "}]}";
  absl::Status status = DecodeError(bomb);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("deeper"));
  EXPECT_LT(status.message().size(), 1000u);
}

// Parsed JSON takes about eight times its text: a body of numbers as large
// as --max-message-bytes would take gigabytes, so the JSON part is bounded on
// its own, and the binary part (which costs its size) is not.
TEST(RestInferCodecTest, JsonPartLargerThanTheLimitIsRefusedUnparsed) {
  std::string numbers;
  numbers.reserve(kMaxRestJsonBytes + 8);
  while (numbers.size() <= kMaxRestJsonBytes) numbers += "0,";
  const std::string body =
      R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[)" +
      numbers + "0]}]}";
  absl::Status status = DecodeError(body);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("binary tensor extension"));

  const std::string header =
      R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],)"
      R"("parameters":{"binary_data_size":1}}]})";
  std::string binary = header + std::string(1, '\x07');
  absl::StatusOr<RestInferRequest> decoded =
      DecodeRestInferRequest(binary, header.size(), "m", "");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->request.raw_input_contents(0), std::string(1, '\x07'));
}

TEST(RestInferCodecTest, IdParametersAndOutputsPassThrough) {
  absl::StatusOr<RestInferRequest> decoded = Decode(R"({
    "id": "r1",
    "parameters": {"timeout": 5000, "flag": true, "f": 0.5, "s": "x",
                   "big": 18446744073709551615, "binary_data_output": true},
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                "parameters": {"p": 1}, "data": [1, 2]}],
    "outputs": [{"name": "y", "parameters": {"binary_data": false}},
                {"name": "sum"}]})");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const inference::ModelInferRequest& request = decoded->request;
  EXPECT_EQ(request.model_name(), "m");
  EXPECT_EQ(request.id(), "r1");
  EXPECT_EQ(request.parameters().at("timeout").int64_param(), 5000);
  EXPECT_TRUE(request.parameters().at("flag").bool_param());
  EXPECT_EQ(request.parameters().at("f").double_param(), 0.5);
  EXPECT_EQ(request.parameters().at("s").string_param(), "x");
  EXPECT_EQ(request.parameters().at("big").uint64_param(),
            18446744073709551615ull);
  EXPECT_EQ(request.parameters().count("binary_data_output"), 0u);
  EXPECT_EQ(request.inputs(0).parameters().at("p").int64_param(), 1);
  EXPECT_THAT(request.inputs(0).shape(), ElementsAre(1, 2));
  ASSERT_EQ(request.outputs_size(), 2);
  EXPECT_EQ(request.outputs(0).parameters().count("binary_data"), 0u);
  EXPECT_FALSE(decoded->output_format.IsBinary("y"));
  EXPECT_TRUE(decoded->output_format.IsBinary("sum"));
}

TEST(RestInferCodecTest, ClassificationIsRefused) {
  EXPECT_THAT(DecodeError(R"({"inputs":[],"outputs":[{"name":"y",
      "parameters":{"classification":3}}]})")
                  .message(),
              HasSubstr("classification"));
}

TEST(RestInferCodecTest, BinaryInputsTakeTheirSlicesInOrder) {
  const std::string header =
      R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2],)"
      R"("parameters":{"binary_data_size":8}},)"
      R"({"name":"b","datatype":"INT32","shape":[1],"data":[9]},)"
      R"({"name":"c","datatype":"BYTES","shape":[1],)"
      R"("parameters":{"binary_data_size":6}}]})";
  const std::string body =
      header + Bytes<float>({1.0f, 2.0f}) + std::string("\x02\0\0\0hi", 6);
  absl::StatusOr<RestInferRequest> decoded = Decode(body, header.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->request.raw_input_contents(0), Bytes<float>({1.0f, 2.0f}));
  EXPECT_EQ(decoded->request.raw_input_contents(1), Bytes<int32_t>({9}));
  EXPECT_EQ(decoded->request.raw_input_contents(2),
            std::string("\x02\0\0\0hi", 6));
}

TEST(RestInferCodecTest, BinarySizesMustMatchTheBody) {
  const std::string header =
      R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2],)"
      R"("parameters":{"binary_data_size":8}}]})";
  // Too few bytes, too many, a header length past the body, and binary
  // data announced without the header.
  EXPECT_THAT(DecodeError(header + "1234", header.size()).message(),
              HasSubstr("runs past"));
  EXPECT_THAT(DecodeError(header + "123456789", header.size()).message(),
              HasSubstr("1 binary bytes that no input"));
  EXPECT_THAT(DecodeError(header, header.size() + 1).message(),
              HasSubstr("Inference-Header-Content-Length"));
  EXPECT_EQ(DecodeError(header).code(), absl::StatusCode::kInvalidArgument);
  const std::string both =
      R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],)"
      R"("data":[1],"parameters":{"binary_data_size":4}}]})";
  EXPECT_THAT(DecodeError(both + std::string(4, '\0'), both.size()).message(),
              HasSubstr("both \"data\" and binary_data_size"));
}

inference::ModelInferResponse ResponseWith(const std::string& datatype,
                                           std::vector<int64_t> shape,
                                           const std::string& raw) {
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  response.set_id("r1");
  auto* output = response.add_outputs();
  output->set_name("y");
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  response.add_raw_output_contents(raw);
  return response;
}

nlohmann::json DataOf(const std::string& datatype, const std::string& raw) {
  absl::StatusOr<RestInferResponse> encoded =
      EncodeRestInferResponse(ResponseWith(datatype, {-1}, raw), {});
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  if (!encoded.ok()) return nullptr;
  EXPECT_FALSE(encoded->header_length.has_value());
  return nlohmann::json::parse(encoded->body)["outputs"][0]["data"];
}

TEST(RestInferCodecTest, EveryDatatypeToJson) {
  using J = nlohmann::json;
  EXPECT_EQ(DataOf("BOOL", std::string("\x01\x00", 2)), J({true, false}));
  EXPECT_EQ(DataOf("UINT8", Bytes<uint8_t>({255})), J({255}));
  EXPECT_EQ(DataOf("UINT16", Bytes<uint16_t>({65535})), J({65535}));
  EXPECT_EQ(DataOf("UINT32", Bytes<uint32_t>({7})), J({7}));
  EXPECT_EQ(DataOf("UINT64", Bytes<uint64_t>({18446744073709551615ull})),
            J({18446744073709551615ull}));
  EXPECT_EQ(DataOf("INT8", Bytes<int8_t>({-128})), J({-128}));
  EXPECT_EQ(DataOf("INT16", Bytes<int16_t>({-2})), J({-2}));
  EXPECT_EQ(DataOf("INT32", Bytes<int32_t>({-3})), J({-3}));
  EXPECT_EQ(DataOf("INT64", Bytes<int64_t>({INT64_MIN})), J({INT64_MIN}));
  EXPECT_EQ(DataOf("FP32", Bytes<float>({1.5f})), J({1.5}));
  EXPECT_EQ(DataOf("FP64", Bytes<double>({0.1})), J({0.1}));
  EXPECT_EQ(DataOf("FP16", Bytes<uint16_t>({0x3E00})), J({1.5}));
  EXPECT_EQ(DataOf("BF16", Bytes<uint16_t>({0x3FC0})), J({1.5}));
  EXPECT_EQ(DataOf("BYTES", std::string("\x02\0\0\0ab\0\0\0\0", 10)),
            J({"ab", ""}));
}

TEST(RestInferCodecTest, ResponseCarriesNameVersionIdAndShape) {
  absl::StatusOr<RestInferResponse> encoded = EncodeRestInferResponse(
      ResponseWith("FP32", {1, 2}, Bytes<float>({1, 2})), {});
  ASSERT_TRUE(encoded.ok());
  const nlohmann::json body = nlohmann::json::parse(encoded->body);
  EXPECT_EQ(body["model_name"], "m");
  EXPECT_EQ(body["model_version"], "1");
  EXPECT_EQ(body["id"], "r1");
  EXPECT_EQ(body["outputs"][0]["name"], "y");
  EXPECT_EQ(body["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(body["outputs"][0]["shape"], nlohmann::json({1, 2}));
}

TEST(RestInferCodecTest, BinaryOutputsFollowTheJson) {
  inference::ModelInferResponse response =
      ResponseWith("FP32", {2}, Bytes<float>({1, 2}));
  auto* sum = response.add_outputs();
  sum->set_name("sum");
  sum->set_datatype("FP32");
  sum->add_shape(1);
  response.add_raw_output_contents(Bytes<float>({3}));
  RestOutputFormat format;
  format.binary["y"] = true;
  absl::StatusOr<RestInferResponse> encoded =
      EncodeRestInferResponse(response, format);
  ASSERT_TRUE(encoded.ok());
  ASSERT_TRUE(encoded->header_length.has_value());
  const nlohmann::json header =
      nlohmann::json::parse(encoded->body.substr(0, *encoded->header_length));
  EXPECT_EQ(header["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(header["outputs"][0].contains("data"));
  EXPECT_EQ(header["outputs"][1]["data"], nlohmann::json({3.0}));
  EXPECT_EQ(encoded->body.substr(*encoded->header_length),
            Bytes<float>({1, 2}));
}

TEST(RestInferCodecTest, RawContentsThatDoNotFitTheirDatatypeAreInternal) {
  EXPECT_EQ(EncodeRestInferResponse(ResponseWith("FP32", {1}, "abc"), {})
                .status()
                .code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(EncodeRestInferResponse(
                ResponseWith("BYTES", {1}, std::string("\x05\0\0\0ab", 6)), {})
                .status()
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace castserve
