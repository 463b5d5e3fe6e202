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
  EXPECT_THAT(Values(ProcessLogits(Logits({4, -1, 4, 3, 0}), {0, 1}, params)),
              ElementsAreArray({4.f, -kInf, 8.f, 6.f, -kInf}));
  // top-p after top-k: the 8 alone holds more than 0.8 of the mass.
  params.top_p = 0.8;
  EXPECT_THAT(Values(ProcessLogits(Logits({4, -1, 4, 3, 0}), {0, 1}, params)),
              ElementsAreArray({-kInf, -kInf, 8.f, -kInf, -kInf}));
}

TEST(SamplingTest, TemperatureDrawsFollowTheSoftmax) {
  const at::Tensor logits = Logits({1, 2, 0, -1, 0.5});
  for (double temperature : {1.0, 0.7}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 42;
    auto sampler = Sampler::Create(params);
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    constexpr int kDraws = 20000;
    std::vector<int> counts(5, 0);
    for (int i = 0; i < kDraws; ++i) ++counts.at(sampler->Next(logits, {}));
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
  Sampler sampler = *Sampler::Create(params);
  const at::Tensor logits = at::zeros({64}, at::kFloat);  // Uniform.
  std::vector<int64_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(sampler.Next(logits, tokens));
  return tokens;
}

TEST(SamplingTest, DrawsDependOnlyOnTheSeed) {
  EXPECT_EQ(Draw(7, 32), Draw(7, 32));
  EXPECT_NE(Draw(7, 32), Draw(8, 32));
}

TEST(SamplingTest, GreedyIsArgmaxAfterThePenalty) {
  Sampler greedy = *Sampler::Create({});
  EXPECT_EQ(greedy.Next(Logits({1, 3, 3, 2}), {}), 1);  // Ties: lowest id.
  SamplingParams params;
  params.repetition_penalty = 2;
  Sampler penalised = *Sampler::Create(params);
  EXPECT_EQ(penalised.Next(Logits({1, 3, 3, 2}), {1, 2}), 3);
}

TEST(SamplingTest, BadValuesAreInvalidArgumentNamingTheParameter) {
  auto error = [](SamplingParams params) {
    absl::Status status = ValidateSamplingParams(params);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Sampler::Create(params).status(), status);
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
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  SamplingParams good;
  good.temperature = 2;
  good.top_k = 5;
  good.top_p = 1e-9;
  good.repetition_penalty = 0.5;
  good.seed = 3;
  EXPECT_TRUE(ValidateSamplingParams(good).ok());
}

}  // namespace
}  // namespace castserve::models
