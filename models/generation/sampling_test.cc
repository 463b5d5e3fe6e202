#include "models/generation/sampling.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::models {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Values(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(),
                            c.data_ptr<float>() + c.numel());
}

at::Tensor Logits(std::vector<float> values) {
  return at::tensor(values, at::kFloat);
}

TEST(SamplingTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  const at::Tensor logits = Logits({2, -1, 0.5, -3, 1});
  // Id 1 twice: penalised once.
  EXPECT_THAT(Values(ApplyRepetitionPenalty(logits, {0, 1, 1, 3}, 2)),
              ElementsAreArray({1.f, -2.f, 0.5f, -6.f, 1.f}));
  EXPECT_THAT(Values(ApplyRepetitionPenalty(logits, {0, 3}, 0.5)),
              ElementsAreArray({4.f, -1.f, 0.5f, -1.5f, 1.f}));
  EXPECT_THAT(Values(ApplyRepetitionPenalty(logits, {0, 3}, 1)),
              ElementsAreArray(Values(logits)));
  EXPECT_THAT(Values(logits), ElementsAreArray({2.f, -1.f, 0.5f, -3.f, 1.f}));
}

TEST(SamplingTest, TopKKeepsTheKHighestAndTiesAtTheKth) {
  const at::Tensor logits = Logits({1, 3, 2, 3, 0});
  EXPECT_THAT(Values(ApplyTopK(logits, 1)),
              ElementsAreArray({-kInf, 3.f, -kInf, 3.f, -kInf}));
  EXPECT_THAT(Values(ApplyTopK(logits, 3)),
              ElementsAreArray({-kInf, 3.f, 2.f, 3.f, -kInf}));
  EXPECT_THAT(Values(ApplyTopK(logits, 10)), ElementsAreArray(Values(logits)));
}

TEST(SamplingTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.15, 0.5, 0.05, 0.3.
  const at::Tensor logits = Logits({0.15, 0.5, 0.05, 0.3}).log();
  const std::vector<float> v = Values(logits);
  EXPECT_THAT(Values(ApplyTopP(logits, 0.4)),
              ElementsAreArray({-kInf, v[1], -kInf, -kInf}));
  EXPECT_THAT(Values(ApplyTopP(logits, 0.7)),
              ElementsAreArray({-kInf, v[1], -kInf, v[3]}));
  EXPECT_THAT(Values(ApplyTopP(logits, 0.85)),
              ElementsAreArray({v[0], v[1], -kInf, v[3]}));
  EXPECT_THAT(Values(ApplyTopP(logits, 1)), ElementsAreArray(v));
  // At least one token, however small p.
  EXPECT_THAT(Values(ApplyTopP(logits, 1e-9)),
              ElementsAreArray({-kInf, v[1], -kInf, -kInf}));
}

TEST(SamplingTest, ProcessLogitsRunsPenaltyTemperatureTopKTopP) {
  SamplingParams params;
  params.repetition_penalty = 2;
  params.temperature = 0.5;
  params.top_k = 3;
  params.top_p = 1;
  // Penalty: {2, -2, 4, 3, 0} (ids 0 and 1); temperature: {4, -4, 8, 6, 0};
  // top-3: 8, 6, 4.
  EXPECT_THAT(
      Values(ProcessLogits(Logits({4, -1, 4, 3, 0}), {0, 1}, {}, params)),
      ElementsAreArray({4.f, -kInf, 8.f, 6.f, -kInf}));
  // top-p after top-k: the 8 alone holds more than 0.8 of the mass.
  params.top_p = 0.8;
  EXPECT_THAT(
      Values(ProcessLogits(Logits({4, -1, 4, 3, 0}), {0, 1}, {}, params)),
      ElementsAreArray({-kInf, -kInf, 8.f, -kInf, -kInf}));
}

TEST(SamplingTest, TemperatureDrawsFollowTheSoftmax) {
  const at::Tensor logits = Logits({1, 2, 0, -1, 0.5});
  for (double temperature : {1.0, 0.7}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 42;
    Sampler sampler = Sampler::ForChecked(params);
    constexpr int kDraws = 20000;
    std::vector<int> counts(5, 0);
    for (int i = 0; i < kDraws; ++i) ++counts.at(sampler.Next(logits, {}).id);
    const std::vector<float> expected =
        Values((logits / temperature).softmax(0));
    for (int id = 0; id < 5; ++id) {
      EXPECT_NEAR(static_cast<double>(counts[id]) / kDraws, expected[id], 0.01)
          << "id " << id << " at temperature " << temperature;
    }
  }
}

std::vector<int64_t> Draw(uint64_t seed, int n) {
  SamplingParams params;
  params.temperature = 1;
  params.seed = seed;
  Sampler sampler = Sampler::ForChecked(params);
  const at::Tensor logits = at::zeros({64}, at::kFloat);  // Uniform.
  std::vector<int64_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(sampler.Next(logits, tokens).id);
  return tokens;
}

TEST(SamplingTest, DrawsDependOnlyOnTheSeed) {
  EXPECT_EQ(Draw(7, 32), Draw(7, 32));
  EXPECT_NE(Draw(7, 32), Draw(8, 32));
}

TEST(SamplingTest, GreedyIsArgmaxAfterThePenalty) {
  Sampler greedy = Sampler::ForChecked({});
  EXPECT_EQ(greedy.Next(Logits({1, 3, 3, 2}), {}).id, 1);  // Ties: lowest id.
  SamplingParams params;
  params.repetition_penalty = 2;
  Sampler penalised = Sampler::ForChecked(params);
  EXPECT_EQ(penalised.Next(Logits({1, 3, 3, 2}), {1, 2}).id, 3);
}

TEST(SamplingTest, PresenceAndFrequencyPenaltiesCountEachGeneratedId) {
  const at::Tensor logits = Logits({2, -1, 0.5, -3, 1});
  // Id 1 twice, id 3 once: logit -= 0.25 * count + 1 * (count > 0).
  EXPECT_THAT(Values(ApplyPresenceFrequencyPenalty(logits, {1, 3, 1}, 1, 0.25)),
              ElementsAreArray({2.f, -2.5f, 0.5f, -4.25f, 1.f}));
  // Negative values reward repetition.
  EXPECT_THAT(Values(ApplyPresenceFrequencyPenalty(logits, {0}, -0.5, -1)),
              ElementsAreArray({3.5f, -1.f, 0.5f, -3.f, 1.f}));
  EXPECT_THAT(Values(ApplyPresenceFrequencyPenalty(logits, {}, 2, 2)),
              ElementsAreArray(Values(logits)));
}

TEST(SamplingTest, PenaltiesRunRepetitionThenFrequencyPresenceThenTemperature) {
  SamplingParams params;
  params.repetition_penalty = 2;
  params.presence_penalty = 1;
  params.frequency_penalty = 0.5;
  params.temperature = 0.5;
  // Repetition over ids {0, 1} (prompt and new): {2, -2, 4, 3, 0}; frequency
  // and presence over the new ids {1, 1}: id 1 -= 0.5 * 2 + 1 -> -4;
  // temperature: {4, -8, 8, 6, 0}.
  EXPECT_THAT(Values(ProcessLogits(Logits({4, -1, 4, 3, 0}), {0, 1, 1}, {1, 1},
                                   params)),
              ElementsAreArray({4.f, -8.f, 8.f, 6.f, 0.f}));
}

TEST(SamplingTest, GreedyPenalisesOnlyTheTokensItGenerated) {
  SamplingParams params;
  params.presence_penalty = 1.5;
  Sampler greedy = Sampler::ForChecked(params);
  const at::Tensor logits = Logits({0, 3, 2, 0});
  // The prompt's ids (1 among them) are not counted: id 1 wins, then pays.
  EXPECT_EQ(greedy.Next(logits, {1, 1, 1}).id, 1);
  EXPECT_EQ(greedy.Next(logits, {1, 1, 1, 1}).id, 2);  // 3 - 1.5 < 2.
  // Both generated once: 1.5 against 0.5.
  EXPECT_EQ(greedy.Next(logits, {1, 1, 1, 1, 2}).id, 1);
  params.presence_penalty = 0;
  params.frequency_penalty = 0.6;
  Sampler frequency = Sampler::ForChecked(params);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(frequency.Next(logits, ids).id);
  // 3 - 0.6 = 2.4 > 2, 3 - 1.2 = 1.8 < 2, then 2 - 0.6 = 1.4 < 1.8.
  EXPECT_THAT(ids, ElementsAreArray({1, 1, 2, 1}));
}

TEST(SamplingTest, LogprobsAreTheRawDistributionsWhateverTheProcessors) {
  const at::Tensor logits = Logits({1, 2, 0, -1, 0.5});
  const std::vector<float> expected = Values(logits.log_softmax(0));
  SamplingParams params;
  params.logprobs = true;
  params.top_logprobs = 3;
  params.temperature = 0.3;
  params.top_k = 1;  // Only id 1 can be drawn.
  params.presence_penalty = 2;
  Sampler sampler = Sampler::ForChecked(params);
  SampledToken first = sampler.Next(logits, {});
  ASSERT_EQ(first.id, 1);
  ASSERT_TRUE(first.logprobs.has_value());
  EXPECT_FLOAT_EQ(first.logprobs->logprob, expected[1]);
  EXPECT_THAT(first.logprobs->top_ids, ElementsAreArray({1, 0, 4}));
  EXPECT_THAT(first.logprobs->top_logprobs,
              ElementsAreArray({expected[1], expected[0], expected[4]}));
  // The penalty moved the draw to id 0; the log-probabilities stay raw.
  SampledToken second = sampler.Next(logits, {1});
  ASSERT_EQ(second.id, 0);
  EXPECT_FLOAT_EQ(second.logprobs->logprob, expected[0]);
  EXPECT_EQ(second.logprobs->top_ids.front(), 1);
  // Without top_logprobs only the chosen one; without logprobs nothing.
  params.top_logprobs = 0;
  SampledToken alone = Sampler::ForChecked(params).Next(logits, {});
  EXPECT_TRUE(alone.logprobs->top_ids.empty());
  params.logprobs = false;
  EXPECT_FALSE(Sampler::ForChecked(params).Next(logits, {}).logprobs);
  // More alternatives than the vocabulary: all of them.
  EXPECT_EQ(LogprobsOf(logits, 2, 20).top_ids.size(), 5u);
}

TEST(SamplingTest, BadValuesAreInvalidArgumentNamingTheParameter) {
  auto error = [](SamplingParams params) {
    absl::Status status = ValidateSamplingParams(params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  const double nan = std::nan("");
  auto with = [](auto field, auto value) {
    SamplingParams params;
    params.*field = value;
    return params;
  };
  constexpr auto kTemperature = &SamplingParams::temperature;
  constexpr auto kTopK = &SamplingParams::top_k;
  constexpr auto kTopP = &SamplingParams::top_p;
  constexpr auto kPenalty = &SamplingParams::repetition_penalty;
  EXPECT_THAT(error(with(kTemperature, -0.1)), HasSubstr("temperature"));
  EXPECT_THAT(error(with(kTemperature, nan)), HasSubstr("temperature"));
  EXPECT_THAT(error(with(kTemperature, kInf)), HasSubstr("temperature"));
  EXPECT_THAT(error(with(kTopK, int64_t{-1})), HasSubstr("top_k is -1"));
  EXPECT_THAT(error(with(kTopP, 0.0)), HasSubstr("top_p is 0"));
  EXPECT_THAT(error(with(kTopP, 1.5)), HasSubstr("top_p is 1.5"));
  EXPECT_THAT(error(with(kTopP, nan)), HasSubstr("top_p"));
  EXPECT_THAT(error(with(kPenalty, 0.0)), HasSubstr("repetition_penalty is 0"));
  EXPECT_THAT(error(with(kPenalty, -1.0)), HasSubstr("repetition_penalty"));
  EXPECT_THAT(error(with(kPenalty, kInf)), HasSubstr("repetition_penalty"));
  constexpr auto kPresence = &SamplingParams::presence_penalty;
  constexpr auto kFrequency = &SamplingParams::frequency_penalty;
  EXPECT_THAT(error(with(kPresence, 2.5)),
              HasSubstr("presence_penalty is 2.5"));
  EXPECT_THAT(error(with(kPresence, nan)), HasSubstr("presence_penalty"));
  EXPECT_THAT(error(with(kFrequency, -2.01)),
              HasSubstr("frequency_penalty is -2.01"));
  EXPECT_THAT(error(with(kFrequency, kInf)), HasSubstr("frequency_penalty"));
  SamplingParams top;
  top.logprobs = true;
  top.top_logprobs = 21;
  EXPECT_THAT(error(top), HasSubstr("top_logprobs is 21"));
  top.top_logprobs = -1;
  EXPECT_THAT(error(top), HasSubstr("top_logprobs is -1"));
  top.logprobs = false;
  top.top_logprobs = 2;
  EXPECT_THAT(error(top), HasSubstr("needs logprobs"));
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  SamplingParams good;
  good.temperature = 2;
  good.top_k = 5;
  good.top_p = 1e-9;
  good.repetition_penalty = 0.5;
  good.presence_penalty = -2;
  good.frequency_penalty = 2;
  good.logprobs = true;
  good.top_logprobs = 20;
  good.seed = 3;
  EXPECT_TRUE(ValidateSamplingParams(good).ok());
}

}  // namespace
}  // namespace castserve::models
