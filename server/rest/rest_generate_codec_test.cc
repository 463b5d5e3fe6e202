#include "server/rest/rest_generate_codec.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/servables/generation/generation_parameters.h"

namespace castserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A generation model's metadata: text_input BYTES [1], input_ids INT64 [-1].
inference::ModelMetadataResponse Metadata() {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("llm");
  auto* text = metadata.add_inputs();
  text->set_name("text_input");
  text->set_datatype("BYTES");
  text->add_shape(1);
  auto* ids = metadata.add_inputs();
  ids->set_name("input_ids");
  ids->set_datatype("INT64");
  ids->add_shape(-1);
  return metadata;
}

absl::StatusOr<inference::ModelInferRequest> Decode(const std::string& body) {
  return DecodeGenerateRequest(body, "llm", "1", Metadata());
}

std::string Int64Bytes(const std::vector<int64_t>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(int64_t));
}

TEST(RestGenerateCodecTest, TextInputAndParametersBothPlaces) {
  absl::StatusOr<inference::ModelInferRequest> request =
      Decode(R"({"text_input": "Hi", "id": "g1", "max_tokens": 8,)"
             R"( "stop": ["\n", "."], "parameters": {"temperature": 0.5,)"
             R"( "ignore_eos": true, "stop_token_ids": [2, 7]}})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model_name(), "llm");
  EXPECT_EQ(request->model_version(), "1");
  EXPECT_EQ(request->id(), "g1");
  ASSERT_EQ(request->inputs_size(), 1);
  EXPECT_EQ(request->inputs(0).name(), "text_input");
  EXPECT_EQ(request->inputs(0).datatype(), "BYTES");
  EXPECT_THAT(request->inputs(0).shape(), ::testing::ElementsAre(1));
  EXPECT_EQ(request->raw_input_contents(0), std::string("\x02\0\0\0Hi", 6));
  const auto& parameters = request->parameters();
  EXPECT_EQ(parameters.at("max_tokens").int64_param(), 8);
  EXPECT_EQ(parameters.at("temperature").double_param(), 0.5);
  EXPECT_TRUE(parameters.at("ignore_eos").bool_param());
  // Arrays travel as their JSON text, the form the parameters take.
  EXPECT_EQ(json::parse(parameters.at("stop").string_param()),
            json({"\n", "."}));
  EXPECT_EQ(parameters.at("stop_token_ids").string_param(), "[2,7]");
}

TEST(RestGenerateCodecTest, InputIdsBecomeInt64OfTheirLength) {
  absl::StatusOr<inference::ModelInferRequest> request =
      Decode(R"({"input_ids": [1, 5, 9]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->inputs(0).datatype(), "INT64");
  EXPECT_THAT(request->inputs(0).shape(), ::testing::ElementsAre(3));
  EXPECT_EQ(request->raw_input_contents(0), Int64Bytes({1, 5, 9}));
  EXPECT_TRUE(request->parameters().empty());
}

TEST(RestGenerateCodecTest, UnknownKeysAndBadValuesAreNamed) {
  absl::StatusOr<inference::ModelInferRequest> unknown =
      Decode(R"({"text_input": "a", "max_new_tokens": 3})");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'max_new_tokens'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("'text_input'"));
  EXPECT_THAT(
      Decode(R"({"text_input": "a", "top_k": {"x": 1}})").status().message(),
      HasSubstr("parameter 'top_k'"));
  EXPECT_THAT(Decode(R"({"max_tokens": 1, "parameters": {"max_tokens": 2}})")
                  .status()
                  .message(),
              HasSubstr("'max_tokens' is given twice"));
  EXPECT_THAT(Decode(R"({"input_ids": [[1, 2]]})").status().message(),
              HasSubstr("flat array"));
  EXPECT_THAT(Decode(R"({"input_ids": ["a"]})").status().message(),
              HasSubstr("input_ids"));
  EXPECT_THAT(Decode(R"({"id": 7})").status().message(), HasSubstr("\"id\""));
  EXPECT_THAT(Decode("[1]").status().message(), HasSubstr("JSON object"));
  EXPECT_EQ(Decode("{").status().code(), absl::StatusCode::kInvalidArgument);
}

// The names REST takes at the top level are the ones the generation
// parameters parse: a value of a wrong type is refused naming each.
TEST(RestGenerateCodecTest, TopLevelNamesAreTheParsedParameters) {
  for (const char* name : kGenerationParameterNames) {
    bool refused = false;
    for (bool as_string : {false, true}) {
      InferParameters parameters;
      if (as_string) {
        parameters[name].set_string_param("x");
      } else {
        parameters[name].set_bool_param(true);
      }
      absl::StatusOr<GenerationParameters> parsed =
          ParseGenerationParameters(parameters);
      if (!parsed.ok()) {
        refused = true;
        EXPECT_THAT(parsed.status().message(), HasSubstr(name));
      }
    }
    EXPECT_TRUE(refused) << name;
  }
}

TEST(RestGenerateCodecTest, ResponseHasTextIdsAndFinishReason) {
  inference::ModelInferResponse response;
  response.set_model_name("llm");
  response.set_model_version("1");
  response.set_id("g1");
  auto* text = response.add_outputs();
  text->set_name("text_output");
  text->set_datatype("BYTES");
  text->add_shape(1);
  response.add_raw_output_contents(std::string("\x03\0\0\0abc", 7));
  auto* ids = response.add_outputs();
  ids->set_name("output_ids");
  ids->set_datatype("INT64");
  ids->add_shape(1);
  response.add_raw_output_contents(Int64Bytes({42}));
  (*response.mutable_parameters())["finish_reason"].set_string_param("stop");
  (*response.mutable_parameters())["triton_final_response"].set_bool_param(
      true);
  absl::StatusOr<std::string> encoded = EncodeGenerateResponse(response);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(json::parse(*encoded), json({{"model_name", "llm"},
                                         {"model_version", "1"},
                                         {"id", "g1"},
                                         {"text_output", "abc"},
                                         {"output_ids", {42}},
                                         {"finish_reason", "stop"}}));
  EXPECT_EQ(ServerSentEvent("{}"), "data: {}\n\n");
}

TEST(RestGenerateCodecTest, EmptyFinalResponseHasOnlyTheReason) {
  inference::ModelInferResponse response;
  response.set_model_name("llm");
  (*response.mutable_parameters())["finish_reason"].set_string_param("length");
  absl::StatusOr<std::string> encoded = EncodeGenerateResponse(response);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(json::parse(*encoded), json({{"model_name", "llm"},
                                         {"model_version", ""},
                                         {"finish_reason", "length"}}));
}

}  // namespace
}  // namespace castserve
