#include "server/servables/generation/generation_parameters.h"

#include <string>

#include "gtest/gtest.h"
#include "server/test_util/infer_parameters.h"

namespace castserve {
namespace {

InferParameters With(const std::string& name,
                     const inference::InferParameter& value) {
  InferParameters parameters;
  parameters[name] = value;
  return parameters;
}
using test_util::Bool;
using test_util::Double;
using test_util::Int;
using test_util::String;
using test_util::Uint;

// The error message for `name` = `value`, or "" when it parses.
std::string ErrorFor(const std::string& name,
                     const inference::InferParameter& value) {
  absl::StatusOr<GenerationParameters> parsed =
      ParseGenerationParameters(With(name, value));
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(GenerationParametersTest, DefaultsWithoutParameters) {
  absl::StatusOr<GenerationParameters> parsed =
      ParseGenerationParameters(InferParameters());
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->max_tokens.has_value());
  EXPECT_EQ(parsed->sampling.temperature, 0);
  EXPECT_TRUE(parsed->stop.empty());
  EXPECT_FALSE(parsed->ignore_eos);
  EXPECT_FALSE(parsed->empty_final_response);
}

TEST(GenerationParametersTest, ParsesEveryParameter) {
  InferParameters parameters;
  parameters["max_tokens"] = Uint(7);
  parameters["temperature"] = Double(0.5);
  parameters["top_k"] = Int(3);
  parameters["top_p"] = Int(1);  // A number takes an int64 too.
  parameters["repetition_penalty"] = Double(1.5);
  parameters["presence_penalty"] = Double(-0.5);
  parameters["frequency_penalty"] = Int(2);
  parameters["logprobs"] = Bool(true);
  parameters["top_logprobs"] = Uint(4);
  parameters["seed"] = Int(42);
  parameters["stop"] = String(R"(["###", "\n\n"])");
  parameters["stop_token_ids"] = String("[2, 7]");
  parameters["ignore_eos"] = Bool(true);
  parameters["triton_enable_empty_final_response"] = Bool(true);
  parameters["timeout"] = Int(5);         // Triton's: left to the core.
  parameters["something_else"] = Int(1);  // Unknown: ignored.
  absl::StatusOr<GenerationParameters> parsed =
      ParseGenerationParameters(parameters);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->max_tokens, 7);
  EXPECT_EQ(parsed->sampling.temperature, 0.5);
  EXPECT_EQ(parsed->sampling.top_k, 3);
  EXPECT_EQ(parsed->sampling.top_p, 1.0);
  EXPECT_EQ(parsed->sampling.repetition_penalty, 1.5);
  EXPECT_EQ(parsed->sampling.presence_penalty, -0.5);
  EXPECT_EQ(parsed->sampling.frequency_penalty, 2.0);
  EXPECT_TRUE(parsed->sampling.logprobs);
  EXPECT_EQ(parsed->sampling.top_logprobs, 4);
  EXPECT_EQ(parsed->sampling.seed, 42u);
  EXPECT_EQ(parsed->stop, (std::vector<std::string>{"###", "\n\n"}));
  EXPECT_EQ(parsed->stop_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_TRUE(parsed->ignore_eos);
  EXPECT_TRUE(parsed->empty_final_response);
}

TEST(GenerationParametersTest, OneStopStringAndOneStopId) {
  absl::StatusOr<GenerationParameters> stop =
      ParseGenerationParameters(With("stop", String("[end")));
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->stop, std::vector<std::string>{"[end"});
  absl::StatusOr<GenerationParameters> id =
      ParseGenerationParameters(With("stop_token_ids", Int(9)));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->stop_token_ids, std::vector<int64_t>{9});
}

TEST(GenerationParametersTest, EveryTypeErrorNamesTheParameter) {
  EXPECT_EQ(ErrorFor("max_tokens", String("8")),
            "parameter 'max_tokens' must be an integer, got a string");
  EXPECT_EQ(ErrorFor("max_tokens", Double(8)),
            "parameter 'max_tokens' must be an integer, got a number");
  EXPECT_EQ(ErrorFor("top_k", String("3")),
            "parameter 'top_k' must be an integer, got a string");
  EXPECT_EQ(ErrorFor("seed", Bool(true)),
            "parameter 'seed' must be an integer, got a bool");
  EXPECT_EQ(ErrorFor("temperature", String("hot")),
            "parameter 'temperature' must be a number, got a string");
  EXPECT_EQ(ErrorFor("top_p", Bool(false)),
            "parameter 'top_p' must be a number, got a bool");
  EXPECT_EQ(ErrorFor("repetition_penalty", Uint(2)),
            "parameter 'repetition_penalty' must be a number, got an integer");
  EXPECT_EQ(ErrorFor("presence_penalty", String("x")),
            "parameter 'presence_penalty' must be a number, got a string");
  EXPECT_EQ(ErrorFor("logprobs", Int(1)),
            "parameter 'logprobs' must be a bool, got an integer");
  EXPECT_EQ(ErrorFor("top_logprobs", Double(2)),
            "parameter 'top_logprobs' must be an integer, got a number");
  EXPECT_EQ(ErrorFor("stop", Int(1)),
            "parameter 'stop' must be a string, got an integer");
  EXPECT_EQ(ErrorFor("ignore_eos", Int(1)),
            "parameter 'ignore_eos' must be a bool, got an integer");
  EXPECT_EQ(ErrorFor("triton_enable_empty_final_response", String("true")),
            "parameter 'triton_enable_empty_final_response' must be a bool, "
            "got a string");
  EXPECT_NE(ErrorFor("stop_token_ids", Double(1)).find("'stop_token_ids'"),
            std::string::npos);
  EXPECT_NE(ErrorFor("stop_token_ids", String("[1, \"a\"]"))
                .find("'stop_token_ids' must be a JSON array of integers"),
            std::string::npos);
  EXPECT_NE(ErrorFor("stop_token_ids", String("7")).find("'stop_token_ids'"),
            std::string::npos);
  EXPECT_NE(ErrorFor("stop", String("[\"a\", 1]"))
                .find("'stop' must be a string or a JSON array of strings"),
            std::string::npos);
}

TEST(GenerationParametersTest, FormErrorsNameTheParameter) {
  // The ranges of max_tokens, the sampling parameters and the stop ids are
  // the one check's (generation_request_test.cc).
  EXPECT_NE(ErrorFor("max_tokens", Uint(~uint64_t{0})).find("'max_tokens'"),
            std::string::npos);
  EXPECT_EQ(ErrorFor("seed", Int(-5)), "parameter 'seed' must be >= 0, got -5");
  EXPECT_NE(ErrorFor("stop", String("")).find("'stop'"), std::string::npos);
  EXPECT_NE(ErrorFor("stop", String("\xC3")).find("UTF-8"), std::string::npos);
  EXPECT_NE(ErrorFor("stop", String(std::string(1000, 'x'))).find("'stop'"),
            std::string::npos);
}

}  // namespace
}  // namespace castserve
