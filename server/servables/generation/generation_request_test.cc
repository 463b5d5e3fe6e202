#include "server/servables/generation/generation_request.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/test_util/infer_parameters.h"

namespace castserve {
namespace {

using test_util::Double;
using test_util::Int;
using test_util::String;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A model of 256 token ids and 128 positions, ids only, EOS 2.
class GenerationRequestTest : public ::testing::Test {
 protected:
  GenerationRequestTest() {
    limits_.inputs = &inputs_;
    limits_.outputs = &outputs_;
    limits_.vocab_size = 256;
    limits_.max_positions = 128;
    limits_.default_max_tokens = 16;
    limits_.eos_token_ids = {2};
  }

  // A request of `prompt` with `name` = `value` among its parameters.
  static inference::ModelInferRequest Request(
      const std::vector<int64_t>& prompt, const std::string& name = "",
      const inference::InferParameter& value = {}) {
    inference::ModelInferRequest request;
    auto* input = request.add_inputs();
    input->set_name(kInputIdsTensor);
    input->set_datatype("INT64");
    input->add_shape(static_cast<int64_t>(prompt.size()));
    for (int64_t id : prompt) input->mutable_contents()->add_int64_contents(id);
    if (!name.empty()) (*request.mutable_parameters())[name] = value;
    return request;
  }

  // The error message for parameter `name` = `value` on a prompt of {3},
  // or "" when the request is accepted.
  std::string ErrorFor(const std::string& name,
                       const inference::InferParameter& value) const {
    absl::StatusOr<CheckedGenerationRequest> checked =
        DecodeGenerationRequest(Request({3}, name, value), limits_);
    if (checked.ok()) return "";
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(checked.status().message());
  }

  const std::vector<TensorSpec> inputs_ = {
      {kInputIdsTensor, "INT64", {-1}, true}};
  const std::vector<TensorSpec> outputs_ = {
      {kOutputIdsTensor, "INT64", {-1}, false}};
  GenerationLimits limits_;
};

TEST_F(GenerationRequestTest, ChecksIntoOneValueWithTheModelsDefaults) {
  absl::StatusOr<CheckedGenerationRequest> checked = DecodeGenerationRequest(
      Request({3, 4, 5}, "temperature", Double(0.5)), limits_);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_THAT(checked->generation.prompt(), ElementsAre(3, 4, 5));
  EXPECT_EQ(checked->generation.options().max_new_tokens, 16);
  EXPECT_THAT(checked->generation.options().eos_token_ids, ElementsAre(2));
  EXPECT_EQ(checked->generation.options().sampling.temperature, 0.5);
  // Checked against the model's limits, which the engine asserts.
  EXPECT_EQ(checked->generation.vocab_size(), 256);
  EXPECT_EQ(checked->generation.max_positions(), 128);
}

TEST_F(GenerationRequestTest, RangeErrorsNameTheParameter) {
  // Moved from generation_parameters_test.cc: the ranges are checked once,
  // by models::CheckGenerationRequest, when the request is decoded.
  EXPECT_THAT(ErrorFor("max_tokens", Int(0)),
              HasSubstr("max_new_tokens is 0 (a request's max_tokens)"));
  EXPECT_THAT(ErrorFor("max_tokens", Int(int64_t{1} << 40)),
              HasSubstr("max_new_tokens is 1099511627776 (a request's "
                        "max_tokens); it must be in [1, 1048576]"));
  EXPECT_THAT(ErrorFor("max_tokens", Int(200)),
              HasSubstr("exceeds the model's 128 positions"));
  EXPECT_THAT(ErrorFor("top_k", Int(-1)), HasSubstr("top_k is -1"));
  EXPECT_THAT(ErrorFor("temperature", Double(-1)),
              HasSubstr("temperature is -1"));
  EXPECT_THAT(ErrorFor("top_p", Double(0)), HasSubstr("top_p is 0"));
  EXPECT_THAT(ErrorFor("top_p", Double(1.5)), HasSubstr("top_p is 1.5"));
  EXPECT_THAT(ErrorFor("repetition_penalty", Double(0)),
              HasSubstr("repetition_penalty is 0"));
  EXPECT_THAT(ErrorFor("stop_token_ids", Int(-1)),
              HasSubstr("stop_token_ids: token id -1 is outside"));
  EXPECT_THAT(ErrorFor("stop_token_ids", String("[-3]")),
              HasSubstr("stop_token_ids: token id -3"));
  EXPECT_THAT(ErrorFor("stop_token_ids", String("[256]")),
              HasSubstr("stop_token_ids: token id 256"));
  EXPECT_EQ(ErrorFor("top_k", Int(0)), "");
  EXPECT_EQ(ErrorFor("max_tokens", Int(127)), "");
}

TEST_F(GenerationRequestTest, PromptErrorsAreTheChecks) {
  auto error = [&](const std::vector<int64_t>& prompt) {
    absl::StatusOr<CheckedGenerationRequest> checked =
        DecodeGenerationRequest(Request(prompt), limits_);
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(checked.status().message());
  };
  EXPECT_THAT(error({3, 256}), HasSubstr("token id 256"));
  EXPECT_THAT(error(std::vector<int64_t>(129, 3)),
              HasSubstr("129 tokens, more than the model's 128 positions"));
  EXPECT_THAT(ErrorFor("stop", String("x")), HasSubstr("no tokenizer"));
}

}  // namespace
}  // namespace castserve
