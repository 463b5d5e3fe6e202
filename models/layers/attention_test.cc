#include "models/layers/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace castserve::models {
namespace {

// Attention of one query row, in double, over the keys `visible` allows,
// with kv head `kv_head`.
std::vector<double> ReferenceRow(const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, int64_t b, int64_t h,
                                 int64_t i, int64_t kv_head, double scale,
                                 const std::vector<bool>& visible) {
  const int64_t keys = k.size(2), dim = q.size(3);
  std::vector<double> scores(keys, 0);
  double max_score = -1e300;
  for (int64_t j = 0; j < keys; ++j) {
    if (!visible[j]) continue;
    for (int64_t d = 0; d < dim; ++d) {
      scores[j] += q[b][h][i][d].item<double>() *
                   k[b][kv_head][j][d].item<double>() * scale;
    }
    max_score = std::max(max_score, scores[j]);
  }
  double total = 0;
  for (int64_t j = 0; j < keys; ++j) {
    scores[j] = visible[j] ? std::exp(scores[j] - max_score) : 0;
    total += scores[j];
  }
  std::vector<double> out(dim, 0);
  for (int64_t j = 0; j < keys; ++j) {
    for (int64_t d = 0; d < dim; ++d) {
      out[d] += scores[j] / total * v[b][kv_head][j][d].item<double>();
    }
  }
  return out;
}

TEST(ScaledDotProductAttentionTest, GroupedQueryCausalPaddedMatchesReference) {
  at::manual_seed(3);
  const int64_t batch = 2, q_heads = 4, kv_heads = 2, seq = 5, dim = 6;
  at::Tensor q = at::randn({batch, q_heads, seq, dim});
  at::Tensor k = at::randn({batch, kv_heads, seq, dim});
  at::Tensor v = at::randn({batch, kv_heads, seq, dim});
  // Batch 1 is right-padded: its last two tokens are padding.
  at::Tensor mask =
      at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).view({batch, seq});
  at::Tensor bias =
      MakeAttentionBias(mask, batch, seq, seq, /*causal=*/true, at::kFloat);
  const double scale = 1 / std::sqrt(static_cast<double>(dim));
  at::Tensor out = ScaledDotProductAttention(q, k, v, bias, scale);
  ASSERT_EQ(out.sizes(), q.sizes());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < q_heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<bool> visible(seq);
        for (int64_t j = 0; j < seq; ++j) {
          visible[j] = j <= i && mask[b][j].item<int64_t>() != 0;
        }
        // Heads 0, 1 share kv head 0; heads 2, 3 kv head 1.
        std::vector<double> expected =
            ReferenceRow(q, k, v, b, h, i, h / 2, scale, visible);
        for (int64_t d = 0; d < dim; ++d) {
          EXPECT_NEAR(out[b][h][i][d].item<float>(), expected[d], 1e-5)
              << b << " " << h << " " << i << " " << d;
        }
      }
    }
  }
}

TEST(ScaledDotProductAttentionTest, NoBiasAttendsEverywhere) {
  at::manual_seed(4);
  at::Tensor q = at::randn({1, 2, 3, 4});
  at::Tensor k = at::randn({1, 2, 4, 4});
  at::Tensor v = at::randn({1, 2, 4, 4});
  at::Tensor out = ScaledDotProductAttention(q, k, v, at::Tensor(), 0.5);
  std::vector<bool> all(4, true);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<double> expected =
          ReferenceRow(q, k, v, 0, h, i, h, 0.5, all);
      for (int64_t d = 0; d < 4; ++d) {
        EXPECT_NEAR(out[0][h][i][d].item<float>(), expected[d], 1e-5);
      }
    }
  }
}

TEST(ScaledDotProductAttentionTest, FullyMaskedRowIsFiniteAndBf16Works) {
  at::Tensor q = at::randn({1, 1, 2, 4});
  at::Tensor k = at::randn({1, 1, 2, 4});
  at::Tensor v = at::randn({1, 1, 2, 4});
  // Left padding: query 0 sees no real key.
  at::Tensor mask = at::tensor({0, 1}, at::kLong).view({1, 2});
  at::Tensor bias = MakeAttentionBias(mask, 1, 2, 2, true, at::kFloat);
  EXPECT_TRUE(ScaledDotProductAttention(q, k, v, bias, 0.5)
                  .isfinite()
                  .all()
                  .item<bool>());
  at::Tensor bias16 = MakeAttentionBias(mask, 1, 2, 2, true, at::kBFloat16);
  at::Tensor out16 =
      ScaledDotProductAttention(q.to(at::kBFloat16), k.to(at::kBFloat16),
                                v.to(at::kBFloat16), bias16, 0.5);
  EXPECT_EQ(out16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(out16.isfinite().all().item<bool>());
  // Query 1 sees only key 1, so it returns value 1 exactly (up to bf16).
  EXPECT_TRUE(at::allclose(out16[0][0][1].to(at::kFloat),
                           v[0][0][1].to(at::kBFloat16).to(at::kFloat)));
}

TEST(MakeAttentionBiasTest, CausalAlignsQueriesWithLastKeys) {
  at::Tensor bias =
      MakeAttentionBias(at::Tensor(), 1, 2, 4, /*causal=*/true, at::kFloat);
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{1, 1, 2, 4}));
  // Query 0 is key position 2: sees keys 0..2; query 1 sees all four.
  EXPECT_EQ(bias[0][0][0][2].item<float>(), 0);
  EXPECT_LT(bias[0][0][0][3].item<float>(), -1e30);
  EXPECT_EQ(bias[0][0][1][3].item<float>(), 0);
}

TEST(MakeAttentionBiasTest, SlidingWindowLimitsLookBack) {
  at::Tensor bias = MakeAttentionBias(at::Tensor(), 1, 4, 4, /*causal=*/true,
                                      at::kFloat, /*sliding_window=*/2);
  // Query 3 sees keys 2 and 3 only.
  EXPECT_LT(bias[0][0][3][1].item<float>(), -1e30);
  EXPECT_EQ(bias[0][0][3][2].item<float>(), 0);
  EXPECT_EQ(bias[0][0][3][3].item<float>(), 0);
  EXPECT_EQ(bias[0][0][1][0].item<float>(), 0);
}

TEST(SplitHeadsTest, MergeInvertsSplit) {
  at::Tensor x = at::randn({2, 3, 8});
  at::Tensor heads = SplitHeads(x, 4);
  EXPECT_EQ(heads.sizes(), (std::vector<int64_t>{2, 4, 3, 2}));
  EXPECT_TRUE(at::equal(MergeHeads(heads), x));
}

}  // namespace
}  // namespace castserve::models
