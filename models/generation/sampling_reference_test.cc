// Log-probabilities and OpenAI's presence / frequency penalties against
// transformers on the llama decoder fixture
// (models/testdata/llama/logprobs_reference.json, written by
// tools/gen_logprob_references.py): through Generate and through the
// GenerationScheduler (its result and on_logprobs, several sequences in one
// batch).
#include <ATen/ATen.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "casting/memory/tracking_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/generation/generation.h"
#include "models/generation/generation_scheduler.h"
#include "models/loading/model_loader.h"
#include "platform/json_parser.h"

namespace castserve::models {
namespace {

constexpr char kFolder[] = "models/testdata/llama";
constexpr double kLogprobTolerance = 1e-4;

// One greedy step of the reference: the chosen token and the raw
// distribution's log-probabilities.
struct ReferenceStep {
  int64_t token = 0;
  double logprob = 0;
  std::vector<int64_t> top_ids;
  std::vector<double> top_logprobs;
};

struct LogprobCase {
  std::vector<int64_t> prompt;
  std::vector<ReferenceStep> steps;
};

struct PenaltyCase {
  double presence = 0;
  double frequency = 0;
  double repetition = 1;
  std::vector<int64_t> generated;
};

struct Reference {
  int64_t top = 0;
  std::vector<LogprobCase> logprob_cases;
  std::vector<int64_t> penalty_prompt;
  int64_t penalty_max_new_tokens = 0;
  std::vector<int64_t> penalty_plain;
  std::vector<PenaltyCase> penalty_cases;
};

Reference ReadReference() {
  std::ifstream in(std::string(kFolder) + "/logprobs_reference.json");
  std::stringstream text;
  text << in.rdbuf();
  auto json = platform::ParseJson(text.str());
  EXPECT_TRUE(json.ok()) << json.status();
  Reference ref;
  if (!json.ok()) return ref;
  ref.top = json->at("top").get<int64_t>();
  for (const auto& item : json->at("logprob_cases")) {
    LogprobCase c{item.at("prompt").get<std::vector<int64_t>>(), {}};
    for (const auto& step : item.at("steps")) {
      c.steps.push_back({step.at("token").get<int64_t>(),
                         step.at("logprob").get<double>(),
                         step.at("top_ids").get<std::vector<int64_t>>(),
                         step.at("top_logprobs").get<std::vector<double>>()});
    }
    ref.logprob_cases.push_back(std::move(c));
  }
  ref.penalty_prompt = json->at("penalty_prompt").get<std::vector<int64_t>>();
  ref.penalty_max_new_tokens =
      json->at("penalty_max_new_tokens").get<int64_t>();
  ref.penalty_plain = json->at("penalty_plain").get<std::vector<int64_t>>();
  for (const auto& item : json->at("penalty_cases")) {
    ref.penalty_cases.push_back(
        {item.at("presence_penalty").get<double>(),
         item.at("frequency_penalty").get<double>(),
         item.at("repetition_penalty").get<double>(),
         item.at("generated").get<std::vector<int64_t>>()});
  }
  return ref;
}

GenerationOptions LogprobOptions(const LogprobCase& c, int64_t top) {
  GenerationOptions options;
  options.max_new_tokens = static_cast<int64_t>(c.steps.size());
  options.sampling.logprobs = true;
  options.sampling.top_logprobs = top;
  return options;
}

GenerationOptions PenaltyOptions(const Reference& ref, const PenaltyCase& c) {
  GenerationOptions options;
  options.max_new_tokens = ref.penalty_max_new_tokens;
  options.sampling.presence_penalty = c.presence;
  options.sampling.frequency_penalty = c.frequency;
  options.sampling.repetition_penalty = c.repetition;
  return options;
}

void ExpectLogprobsEqual(const std::vector<TokenLogprobs>& got,
                         const std::vector<int64_t>& tokens,
                         const LogprobCase& expected) {
  ASSERT_EQ(got.size(), expected.steps.size());
  ASSERT_EQ(tokens.size(), expected.steps.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const ReferenceStep& step = expected.steps[i];
    EXPECT_EQ(tokens[i], step.token) << "step " << i;
    EXPECT_NEAR(got[i].logprob, step.logprob, kLogprobTolerance)
        << "step " << i;
    EXPECT_EQ(got[i].top_ids, step.top_ids) << "step " << i;
    ASSERT_EQ(got[i].top_logprobs.size(), step.top_logprobs.size());
    for (size_t k = 0; k < step.top_logprobs.size(); ++k) {
      EXPECT_NEAR(got[i].top_logprobs[k], step.top_logprobs[k],
                  kLogprobTolerance)
          << "step " << i << " rank " << k;
    }
  }
}

class SamplingReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
  void SetUp() override {
    auto model = LoadHfModel(kFolder, {});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    ref_ = ReadReference();
    ASSERT_EQ(ref_.logprob_cases.size(), 2u);
    ASSERT_EQ(ref_.penalty_cases.size(), 5u);
  }

  CheckedGeneration Check(const std::vector<int64_t>& prompt,
                          const GenerationOptions& options) {
    auto checked = CheckGenerationRequest(*model_, prompt, options);
    EXPECT_TRUE(checked.ok()) << checked.status();
    return *std::move(checked);
  }

  std::unique_ptr<Model> model_;
  Reference ref_;
};

TEST_F(SamplingReferenceTest, LogprobsEqualTransformersLogSoftmax) {
  for (const LogprobCase& c : ref_.logprob_cases) {
    auto result =
        Generate(*model_, Check(c.prompt, LogprobOptions(c, ref_.top)));
    ASSERT_TRUE(result.ok()) << result.status();
    ExpectLogprobsEqual(result->logprobs, result->tokens, c);
  }
  // Without logprobs asked: none.
  GenerationOptions plain;
  plain.max_new_tokens = 2;
  auto result = Generate(*model_, Check(ref_.logprob_cases[0].prompt, plain));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->logprobs.empty());
}

TEST_F(SamplingReferenceTest, PenaltiesChangeGreedyAsTheReferenceSays) {
  GenerationOptions plain;
  plain.max_new_tokens = ref_.penalty_max_new_tokens;
  auto unpenalised = Generate(*model_, Check(ref_.penalty_prompt, plain));
  ASSERT_TRUE(unpenalised.ok()) << unpenalised.status();
  EXPECT_EQ(unpenalised->tokens, ref_.penalty_plain);
  for (const PenaltyCase& c : ref_.penalty_cases) {
    auto result =
        Generate(*model_, Check(ref_.penalty_prompt, PenaltyOptions(ref_, c)));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->tokens, c.generated)
        << "presence " << c.presence << " frequency " << c.frequency
        << " repetition " << c.repetition;
    EXPECT_NE(result->tokens, ref_.penalty_plain);
  }
}

// Every case at once in one scheduler: each sequence's penalties count its
// own tokens, and logprobs come out with each token (on_logprobs before
// on_token) and in the result.
TEST_F(SamplingReferenceTest, SchedulerBatchCarriesLogprobsAndPenalties) {
  SchedulerOptions options;
  options.pool_bytes = 8 << 20;
  auto scheduler = GenerationScheduler::Create(*model_, options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  struct Outcome {
    absl::Notification done;
    absl::StatusOr<GenerationResult> result = absl::UnknownError("not done");
    std::vector<TokenLogprobs> streamed;
    size_t tokens_seen_with_logprobs = 0;
    size_t tokens = 0;
  };
  std::vector<std::unique_ptr<Outcome>> outcomes;
  auto submit = [&](CheckedGeneration checked) {
    auto outcome = std::make_unique<Outcome>();
    Outcome* raw = outcome.get();
    SequenceRequest request(std::move(checked));
    request.on_logprobs = [raw](const TokenLogprobs& logprobs) {
      raw->streamed.push_back(logprobs);
    };
    request.on_token = [raw](int64_t) {
      raw->tokens_seen_with_logprobs += raw->streamed.size() == ++raw->tokens;
      return true;
    };
    request.on_done = [raw](absl::StatusOr<GenerationResult> result) {
      raw->result = std::move(result);
      raw->done.Notify();
    };
    outcomes.push_back(std::move(outcome));
    (*scheduler)->Submit(std::move(request));
  };
  for (const LogprobCase& c : ref_.logprob_cases) {
    submit(Check(c.prompt, LogprobOptions(c, ref_.top)));
  }
  for (const PenaltyCase& c : ref_.penalty_cases) {
    submit(Check(ref_.penalty_prompt, PenaltyOptions(ref_, c)));
  }
  for (const auto& outcome : outcomes) {
    ASSERT_TRUE(
        outcome->done.WaitForNotificationWithTimeout(absl::Seconds(120)));
    ASSERT_TRUE(outcome->result.ok()) << outcome->result.status();
  }
  for (size_t i = 0; i < ref_.logprob_cases.size(); ++i) {
    const Outcome& outcome = *outcomes[i];
    ExpectLogprobsEqual(outcome.result->logprobs, outcome.result->tokens,
                        ref_.logprob_cases[i]);
    ExpectLogprobsEqual(outcome.streamed, outcome.result->tokens,
                        ref_.logprob_cases[i]);
    EXPECT_EQ(outcome.tokens_seen_with_logprobs, outcome.tokens);
  }
  for (size_t i = 0; i < ref_.penalty_cases.size(); ++i) {
    const Outcome& outcome = *outcomes[ref_.logprob_cases.size() + i];
    EXPECT_EQ(outcome.result->tokens, ref_.penalty_cases[i].generated)
        << "penalty case " << i;
    EXPECT_TRUE(outcome.result->logprobs.empty());
    EXPECT_TRUE(outcome.streamed.empty());
  }
}

TEST_F(SamplingReferenceTest, CheckRefusesBadPenaltiesAndLogprobs) {
  GenerationOptions options;
  options.max_new_tokens = 1;
  options.sampling.presence_penalty = 2.5;
  auto checked = CheckGenerationRequest(*model_, {3, 4}, options);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checked.status().message(),
              ::testing::HasSubstr("presence_penalty"));
  options.sampling.presence_penalty = 0;
  options.sampling.top_logprobs = 3;
  checked = CheckGenerationRequest(*model_, {3, 4}, options);
  EXPECT_THAT(checked.status().message(), ::testing::HasSubstr("logprobs"));
}

}  // namespace
}  // namespace castserve::models
