#include "client/generate_io.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GenerateIoTest, TextRequestWithTypedParameters) {
  GenerateArgs args;
  args.model = "tiny_llama";
  args.text = "Hi";
  args.parameters = {"max_tokens=8", "temperature=0.5", "ignore_eos=true",
                     "stop=[\"\\n\"]", "seed=-1"};
  absl::StatusOr<inference::ModelInferRequest> request =
      BuildGenerateRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model_name(), "tiny_llama");
  ASSERT_EQ(request->inputs_size(), 1);
  EXPECT_EQ(request->inputs(0).name(), "text_input");
  EXPECT_EQ(request->inputs(0).datatype(), "BYTES");
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(1));
  EXPECT_EQ(request->raw_input_contents(0), std::string("\2\0\0\0Hi", 6));
  const auto& parameters = request->parameters();
  EXPECT_EQ(parameters.at("max_tokens").int64_param(), 8);
  EXPECT_EQ(parameters.at("temperature").double_param(), 0.5);
  EXPECT_TRUE(parameters.at("ignore_eos").bool_param());
  EXPECT_EQ(parameters.at("stop").string_param(), "[\"\\n\"]");
  EXPECT_EQ(parameters.at("seed").int64_param(), -1);
}

TEST(GenerateIoTest, IdsRequestAndItsMistakes) {
  absl::StatusOr<std::vector<int64_t>> ids = ParseIds("1,22,333");
  ASSERT_TRUE(ids.ok());
  GenerateArgs args;
  args.model = "m";
  args.ids = *ids;
  absl::StatusOr<inference::ModelInferRequest> request =
      BuildGenerateRequest(args);
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->inputs(0).name(), "input_ids");
  EXPECT_EQ(request->inputs(0).datatype(), "INT64");
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(3));
  std::vector<int64_t> raw(3);
  std::memcpy(raw.data(), request->raw_input_contents(0).data(), 24);
  EXPECT_THAT(raw, ElementsAre(1, 22, 333));
  EXPECT_THAT(ParseIds("1,x").status().message(), HasSubstr("'x'"));
  args.text = "both";
  EXPECT_THAT(BuildGenerateRequest(args).status().message(),
              HasSubstr("exactly one"));
  args.text.reset();
  args.parameters = {"max_tokens"};
  EXPECT_THAT(BuildGenerateRequest(args).status().message(),
              HasSubstr("KEY=VALUE"));
}

TEST(GenerateIoTest, ReadsTextIdsAndFinishReason) {
  inference::ModelInferResponse response;
  auto* text = response.add_outputs();
  text->set_name("text_output");
  text->set_datatype("BYTES");
  response.add_raw_output_contents(std::string("\3\0\0\0 ok", 7));
  auto* ids = response.add_outputs();
  ids->set_name("output_ids");
  ids->set_datatype("INT64");
  const int64_t values[] = {7, 8};
  response.add_raw_output_contents(
      std::string(reinterpret_cast<const char*>(values), sizeof values));
  (*response.mutable_parameters())["finish_reason"].set_string_param("stop");
  absl::StatusOr<GeneratedPiece> piece = ReadGeneratedPiece(response);
  ASSERT_TRUE(piece.ok()) << piece.status();
  EXPECT_EQ(piece->text, " ok");
  EXPECT_THAT(piece->ids, ElementsAre(7, 8));
  EXPECT_EQ(piece->finish_reason, "stop");
  EXPECT_EQ(PieceText(*piece, true), " ok");
  piece->text.reset();
  EXPECT_EQ(PieceText(*piece, false), "7 8");
  EXPECT_EQ(PieceText(*piece, true), " 7 8");
  response.set_raw_output_contents(1, "123");
  EXPECT_EQ(ReadGeneratedPiece(response).status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace castserve
