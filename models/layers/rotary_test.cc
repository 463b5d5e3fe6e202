#include "models/layers/rotary.h"

#include <ATen/ATen.h>

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;

constexpr double kPi = 3.14159265358979323846;

TEST(RopeOptionsTest, RejectsBadFields) {
  RopeOptions odd;
  odd.head_dim = 7;
  EXPECT_THAT(std::string(odd.Validate().message()), HasSubstr("head_dim"));
  RopeOptions bands;
  bands.head_dim = 8;
  bands.type = RopeType::kLlama3;
  bands.low_freq_factor = 4;
  bands.high_freq_factor = 1;
  EXPECT_THAT(std::string(bands.Validate().message()),
              HasSubstr("low_freq_factor"));
  RopeType type;
  absl::Status yarn = ParseRopeType("yarn", &type);
  EXPECT_EQ(yarn.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(yarn.message()), HasSubstr("llama3"));
  ASSERT_TRUE(ParseRopeType("llama3", &type).ok());
  EXPECT_EQ(type, RopeType::kLlama3);
}

TEST(RopeInverseFrequenciesTest, DefaultIsThetaPower) {
  RopeOptions options;
  options.head_dim = 16;
  options.theta = 500000;
  at::Tensor inv_freq = RopeInverseFrequencies(options);
  ASSERT_EQ(inv_freq.numel(), 8);
  for (int i = 0; i < 8; ++i) {
    const double expected = std::pow(500000.0, -2.0 * i / 16);
    EXPECT_NEAR(inv_freq[i].item<float>(), expected, 1e-6 * expected);
  }
}

TEST(RopeInverseFrequenciesTest, Llama3ScalesLowFrequenciesOnly) {
  RopeOptions options;
  options.head_dim = 64;
  options.theta = 10000;
  options.type = RopeType::kLlama3;
  options.factor = 8;
  options.low_freq_factor = 1;
  options.high_freq_factor = 4;
  options.original_max_position_embeddings = 64;
  RopeOptions plain = options;
  plain.type = RopeType::kDefault;
  at::Tensor scaled = RopeInverseFrequencies(options);
  at::Tensor base = RopeInverseFrequencies(plain);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 32; ++i) {
    const double freq = base[i].item<float>();
    const double wavelen = 2 * kPi / freq;
    double expected;
    if (wavelen < 64.0 / 4) {
      expected = freq;
      ++kept;
    } else if (wavelen > 64.0 / 1) {
      expected = freq / 8;
      ++divided;
    } else {
      const double smooth = (64.0 / wavelen - 1) / (4 - 1);
      expected = (1 - smooth) * freq / 8 + smooth * freq;
      ++blended;
    }
    EXPECT_NEAR(scaled[i].item<float>(), expected, 1e-6 * expected) << i;
  }
  // The fixture covers all three bands.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeInverseFrequenciesTest, LinearDividesByFactor) {
  RopeOptions options;
  options.head_dim = 8;
  options.type = RopeType::kLinear;
  options.factor = 4;
  RopeOptions plain = options;
  plain.type = RopeType::kDefault;
  EXPECT_TRUE(at::allclose(RopeInverseFrequencies(options),
                           RopeInverseFrequencies(plain) / 4));
}

// Rotating pairs (x_i, x_{i+half}) by angle p * inv_freq[i], computed
// element by element in double.
TEST(ApplyRotaryTest, RotatesHalfPairsByPositionAngle) {
  at::manual_seed(1);
  const int64_t batch = 2, heads = 3, seq = 5, dim = 8, half = 4;
  RopeOptions options;
  options.head_dim = dim;
  at::Tensor inv_freq = RopeInverseFrequencies(options);
  at::Tensor positions =
      at::tensor({0, 1, 2, 3, 4, 7, 3, 9, 0, 2}, at::kLong).view({batch, seq});
  at::Tensor x = at::randn({batch, heads, seq, dim});
  at::Tensor y = ApplyRotary(x, RopeCosSin(inv_freq, positions));
  ASSERT_EQ(y.sizes(), x.sizes());
  auto xa = x.accessor<float, 4>();
  auto ya = y.accessor<float, 4>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t s = 0; s < seq; ++s) {
        const double p = positions[b][s].item<int64_t>();
        for (int64_t i = 0; i < half; ++i) {
          const double angle = p * inv_freq[i].item<float>();
          const double a = xa[b][h][s][i], c = xa[b][h][s][i + half];
          EXPECT_NEAR(ya[b][h][s][i], a * std::cos(angle) - c * std::sin(angle),
                      1e-5);
          EXPECT_NEAR(ya[b][h][s][i + half],
                      c * std::cos(angle) + a * std::sin(angle), 1e-5);
        }
      }
    }
  }
}

TEST(ApplyRotaryTest, KeepsInputDtype) {
  RopeOptions options;
  options.head_dim = 4;
  at::Tensor x = at::randn({1, 1, 3, 4}).to(at::kBFloat16);
  RopeTables tables = RopeCosSin(RopeInverseFrequencies(options),
                                 at::arange(3, at::kLong).view({1, 3}));
  EXPECT_EQ(tables.cos.scalar_type(), at::kFloat);
  EXPECT_EQ(ApplyRotary(x, tables).scalar_type(), at::kBFloat16);
}

}  // namespace
}  // namespace castserve::models
