#include "models/encoders/sentence_pooling.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;

// Two sequences of three 2-wide token embeddings; the second has one
// padding position (its embedding is large so a leak would show).
at::Tensor Hidden() {
  return at::tensor({1.f, 10.f, 2.f, 20.f, 3.f, 30.f,  //
                     4.f, -1.f, 6.f, -3.f, 100.f, 100.f})
      .view({2, 3, 2});
}
at::Tensor Mask() {
  return at::tensor({1, 1, 1, 1, 1, 0}, at::kLong).view({2, 3});
}

PoolingConfig Config(std::vector<PoolingMode> modes) {
  PoolingConfig config;
  config.word_embedding_dimension = 2;
  config.modes = std::move(modes);
  return config;
}

void ExpectRows(const at::Tensor& actual,
                const std::vector<std::vector<float>>& expected) {
  ASSERT_EQ(actual.dim(), 2);
  ASSERT_EQ(actual.size(0), static_cast<int64_t>(expected.size()));
  for (size_t r = 0; r < expected.size(); ++r) {
    ASSERT_EQ(actual.size(1), static_cast<int64_t>(expected[r].size()));
    for (size_t c = 0; c < expected[r].size(); ++c) {
      EXPECT_NEAR(actual[r][c].item<float>(), expected[r][c], 1e-5)
          << "row " << r << " column " << c;
    }
  }
}

TEST(SentencePoolingTest, EachModeUsesOnlyTheMaskedTokens) {
  const float sqrt3 = std::sqrt(3.f), sqrt2 = std::sqrt(2.f);
  ExpectRows(Pool(Config({PoolingMode::kCls}), Hidden(), Mask()),
             {{1, 10}, {4, -1}});
  ExpectRows(Pool(Config({PoolingMode::kMax}), Hidden(), Mask()),
             {{3, 30}, {6, -1}});
  ExpectRows(Pool(Config({PoolingMode::kMean}), Hidden(), Mask()),
             {{2, 20}, {5, -2}});
  ExpectRows(Pool(Config({PoolingMode::kMeanSqrtLen}), Hidden(), Mask()),
             {{6 / sqrt3, 60 / sqrt3}, {10 / sqrt2, -4 / sqrt2}});
  // Weights 1, 2, 3 by position: (1 + 4 + 9) / 6 and (4 + 12) / 3.
  ExpectRows(Pool(Config({PoolingMode::kWeightedMean}), Hidden(), Mask()),
             {{14.f / 6, 140.f / 6}, {16.f / 3, -7.f / 3}});
  ExpectRows(Pool(Config({PoolingMode::kLastToken}), Hidden(), Mask()),
             {{3, 30}, {6, -3}});
}

TEST(SentencePoolingTest, ModesConcatenateInConfigOrder) {
  const at::Tensor pooled =
      Pool(Config({PoolingMode::kCls, PoolingMode::kMean}), Hidden(), Mask());
  ExpectRows(pooled, {{1, 10, 2, 20}, {4, -1, 5, -2}});
}

// As sentence-transformers 6: the first token whose mask is set, so that a
// left-padded sequence gives its first real token, not a padding one.
TEST(SentencePoolingTest, ClsIsTheFirstRealTokenWhateverThePadding) {
  const at::Tensor left =
      at::tensor({1, 1, 1, 0, 1, 1}, at::kLong).view({2, 3});
  ExpectRows(Pool(Config({PoolingMode::kCls}), Hidden(), left),
             {{1, 10}, {6, -3}});
}

TEST(SentencePoolingTest, SequenceWithoutTokensPoolsToZerosNotNan) {
  const at::Tensor none = at::zeros({1, 3}, at::kLong);
  const at::Tensor hidden = Hidden().narrow(0, 0, 1);
  for (PoolingMode mode :
       {PoolingMode::kMean, PoolingMode::kMeanSqrtLen,
        PoolingMode::kWeightedMean, PoolingMode::kLastToken}) {
    const at::Tensor pooled = Pool(Config({mode}), hidden, none);
    EXPECT_FALSE(pooled.isnan().any().item<bool>()) << PoolingModeName(mode);
    EXPECT_EQ(pooled.abs().max().item<float>(), 0) << PoolingModeName(mode);
  }
}

TEST(SentencePoolingTest, NormalizeGivesUnitRows) {
  const at::Tensor rows = at::tensor({3.f, 4.f, 0.f, 0.f}).view({2, 2});
  ExpectRows(L2NormalizeRows(rows), {{0.6f, 0.8f}, {0, 0}});
}

absl::StatusOr<PoolingConfig> Parse(const std::string& json) {
  absl::StatusOr<HfConfig> config =
      HfConfig::Parse(json, "1_Pooling/config.json");
  if (!config.ok()) return config.status();
  return PoolingConfig::FromHf(*config);
}

TEST(SentencePoolingTest, ReadsSentenceTransformersConfig) {
  absl::StatusOr<PoolingConfig> config = Parse(
      R"({"word_embedding_dimension": 384, "pooling_mode_cls_token": false,
          "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true,
          "pooling_mode_mean_sqrt_len_tokens": false})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->word_embedding_dimension, 384);
  EXPECT_EQ(config->modes,
            (std::vector<PoolingMode>{PoolingMode::kMax, PoolingMode::kMean}));
  EXPECT_TRUE(config->include_prompt);
  EXPECT_EQ(config->output_dimension(), 768);
}

// sentence-transformers 6's Pooling config: embedding_dimension and
// pooling_mode, a name or a list concatenated in the listed order.
TEST(SentencePoolingTest, ReadsSentenceTransformers6Config) {
  absl::StatusOr<PoolingConfig> one = Parse(
      R"({"embedding_dimension": 16, "pooling_mode": "cls",
          "include_prompt": true})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->word_embedding_dimension, 16);
  EXPECT_EQ(one->modes, (std::vector<PoolingMode>{PoolingMode::kCls}));
  absl::StatusOr<PoolingConfig> list = Parse(
      R"({"embedding_dimension": 16,
          "pooling_mode": ["mean", "mean_sqrt_len_tokens", "cls"]})");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->modes, (std::vector<PoolingMode>{PoolingMode::kMean,
                                                   PoolingMode::kMeanSqrtLen,
                                                   PoolingMode::kCls}));
  EXPECT_EQ(list->output_dimension(), 48);
  absl::StatusOr<PoolingConfig> unknown =
      Parse(R"({"embedding_dimension": 16, "pooling_mode": "median"})");
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("pooling_mode 'median' is not one of cls, max"));
}

TEST(SentencePoolingTest, MalformedConfigsNameFileAndKey) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"pooling_mode_mean_tokens": true})",
       "1_Pooling/config.json: missing required key "
       "'word_embedding_dimension'"},
      {R"({"word_embedding_dimension": 0, "pooling_mode_mean_tokens": true})",
       "word_embedding_dimension is 0, outside [1, 65536]"},
      {R"({"word_embedding_dimension": 8, "pooling_mode_mean_tokens": 1})",
       "1_Pooling/config.json: key 'pooling_mode_mean_tokens' is not a "
       "boolean"},
      {R"({"word_embedding_dimension": 8, "include_prompt": "yes",
           "pooling_mode_cls_token": true})",
       "key 'include_prompt' is not a boolean"},
      {R"({"word_embedding_dimension": 8})",
       "1_Pooling/config.json: switches on no pooling mode"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<PoolingConfig> config = Parse(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
        << c.json;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace castserve::models
