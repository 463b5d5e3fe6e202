#include "client/tensor_io.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::vector<T> Values(const std::string& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

TEST(TensorIoTest, JsonInputsBecomeRawContentsInNameOrder) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(AddInputsFromJson(R"({
      "input_ids": {"datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, -4]]},
      "attention_mask": {"datatype": "BOOL", "shape": [2], "data": [true, 0]},
      "pixels": {"datatype": "FP16", "shape": [2], "data": [1.5, -0.25]}})",
                                &request)
                  .ok());
  ASSERT_EQ(request.inputs_size(), 3);
  EXPECT_EQ(request.inputs(0).name(), "attention_mask");
  EXPECT_EQ(request.raw_input_contents(0), std::string("\x01\x00", 2));
  EXPECT_EQ(request.inputs(1).name(), "input_ids");
  EXPECT_THAT(request.inputs(1).shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>(request.raw_input_contents(1)),
              ElementsAre(1, 2, 3, -4));
  // 1.5 and -0.25 in IEEE half precision.
  EXPECT_THAT(Values<uint16_t>(request.raw_input_contents(2)),
              ElementsAre(0x3e00, 0xb400));
}

TEST(TensorIoTest, BytesInputsAreLengthPrefixedStrings) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(AddInputsFromJson(R"({
      "text": {"datatype": "BYTES", "shape": [2, 1], "data": [["café"], ["ok"]]}})",
                                &request)
                  .ok());
  ASSERT_EQ(request.inputs_size(), 1);
  EXPECT_EQ(request.inputs(0).datatype(), "BYTES");
  EXPECT_THAT(request.inputs(0).shape(), ElementsAre(2, 1));
  EXPECT_EQ(request.raw_input_contents(0),
            std::string("\x05\0\0\0caf\xC3\xA9\x02\0\0\0ok", 15));
  absl::Status numbers = AddInputsFromJson(
      R"({"text": {"datatype": "BYTES", "shape": [1], "data": [1]}})",
      &request);
  EXPECT_THAT(std::string(numbers.message()),
              HasSubstr("BYTES data must be strings"));
}

TEST(TensorIoTest, RejectsBadInputs) {
  inference::ModelInferRequest request;
  absl::Status count = AddInputsFromJson(
      R"({"x": {"datatype": "FP32", "shape": [3], "data": [1, 2]}})", &request);
  EXPECT_THAT(std::string(count.message()),
              HasSubstr("data has 2 elements; the shape needs 3"));
  absl::Status range = AddInputsFromJson(
      R"({"x": {"datatype": "INT8", "shape": [1], "data": [300]}})", &request);
  EXPECT_THAT(std::string(range.message()), HasSubstr("out of range"));
  EXPECT_FALSE(AddInputsFromJson("[1]", &request).ok());
}

inference::ModelInferResponse Response() {
  inference::ModelInferResponse response;
  auto* output = response.add_outputs();
  output->set_name("y");
  output->set_datatype("FP32");
  output->add_shape(1);
  output->add_shape(2);
  const float values[] = {0.5f, -2.0f};
  response.add_raw_output_contents(
      std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  auto* bf16 = response.add_outputs();
  bf16->set_name("b");
  bf16->set_datatype("BF16");
  bf16->add_shape(1);
  const uint16_t three = 0x4040;  // 3.0 in bfloat16.
  response.add_raw_output_contents(
      std::string(reinterpret_cast<const char*>(&three), 2));
  return response;
}

TEST(TensorIoTest, OutputsToJson) {
  absl::StatusOr<std::string> json = OutputsToJson(Response());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, HasSubstr(R"("y": {"datatype": "FP32", "shape": [1, 2], )"
                               R"("data": [0.5, -2]})"));
  EXPECT_THAT(*json, HasSubstr(R"("data": [3])"));
}

TEST(TensorIoTest, NpyHeaderIsAlignedAndDescribesTheTensor) {
  absl::StatusOr<std::string> npy = OutputToNpy(Response(), 0);
  ASSERT_TRUE(npy.ok()) << npy.status();
  EXPECT_EQ(npy->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  uint16_t header_bytes;
  std::memcpy(&header_bytes, npy->data() + 8, 2);
  EXPECT_EQ((10 + header_bytes) % 64, 0);
  const std::string header = npy->substr(10, header_bytes);
  EXPECT_THAT(header, HasSubstr("'descr': '<f4'"));
  EXPECT_THAT(header, HasSubstr("'shape': (1, 2)"));
  EXPECT_EQ(header.back(), '\n');
  EXPECT_THAT(Values<float>(npy->substr(10 + header_bytes)),
              ElementsAre(0.5f, -2.0f));
  absl::StatusOr<std::string> bf16 = OutputToNpy(Response(), 1);
  ASSERT_TRUE(bf16.ok());
  EXPECT_THAT(*bf16, HasSubstr("'shape': (1,)"));
  EXPECT_THAT(Values<float>(bf16->substr(bf16->size() - 4)), ElementsAre(3.0f));
}

TEST(TensorIoTest, NpyRoundTripsIntoAnInput) {
  absl::StatusOr<std::string> npy = OutputToNpy(Response(), 0);
  ASSERT_TRUE(npy.ok());
  inference::ModelInferRequest request;
  ASSERT_TRUE(AddInputFromNpy("pixels", *npy, &request).ok());
  ASSERT_EQ(request.inputs_size(), 1);
  EXPECT_EQ(request.inputs(0).name(), "pixels");
  EXPECT_EQ(request.inputs(0).datatype(), "FP32");
  EXPECT_THAT(request.inputs(0).shape(), ElementsAre(1, 2));
  EXPECT_THAT(Values<float>(request.raw_input_contents(0)),
              ElementsAre(0.5f, -2.0f));
  EXPECT_FALSE(AddInputFromNpy("x", "not numpy", &request).ok());
}

TEST(TensorIoTest, SafetensorsInputsInNameOrder) {
  const std::string header =
      R"({"b": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},)"
      R"( "a": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},)"
      R"( "__metadata__": {"k": "v"}})";
  std::string file(8, '\0');
  const uint64_t header_bytes = header.size();
  std::memcpy(file.data(), &header_bytes, 8);
  file += header;
  const int64_t seven = 7;
  file.append(reinterpret_cast<const char*>(&seven), 8);
  file.append("\x40\x40\x80\x3f", 4);  // bf16 3.0 and 1.0
  inference::ModelInferRequest request;
  absl::Status status = AddInputsFromSafetensors(file, &request);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(request.inputs_size(), 2);
  EXPECT_EQ(request.inputs(0).name(), "a");
  EXPECT_EQ(request.inputs(0).datatype(), "BF16");
  EXPECT_EQ(request.raw_input_contents(0).size(), 4u);
  EXPECT_EQ(request.inputs(1).datatype(), "INT64");
  EXPECT_THAT(Values<int64_t>(request.raw_input_contents(1)), ElementsAre(7));
  EXPECT_FALSE(AddInputsFromSafetensors(file.substr(0, 20), &request).ok());
}

}  // namespace
}  // namespace castserve
