#include "models/decoder/decoder_attention.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "models/layers/attention.h"

namespace castserve::models {
namespace {

// q [1, 4, 5, 8], k and v [1, 2, 5, 8] (grouped-query), a causal bias.
struct Inputs {
  at::Tensor q, k, v, bias;
};

Inputs MakeInputs() {
  at::manual_seed(11);
  Inputs in;
  in.q = at::randn({1, 4, 5, 8}) * 3;
  in.k = at::randn({1, 2, 5, 8}) * 3;
  in.v = at::randn({1, 2, 5, 8});
  in.bias = MakeAttentionBias(at::Tensor(), 1, 5, 5, /*causal=*/true,
                              at::TensorOptions(at::kFloat));
  return in;
}

TEST(SoftCappedAttentionTest, CapsTheScoresBeforeTheMask) {
  const Inputs in = MakeInputs();
  const double scale = 0.3, cap = 2.0;
  // The scores written out in double: cap * tanh(s / cap), causal, softmax.
  at::Tensor q = in.q.to(at::kDouble), k = in.k.to(at::kDouble),
             v = in.v.to(at::kDouble);
  at::Tensor keys = k.repeat_interleave(2, 1);
  at::Tensor values = v.repeat_interleave(2, 1);
  at::Tensor scores = at::matmul(q, keys.transpose(2, 3)) * scale;
  scores = at::tanh(scores / cap) * cap;
  scores = scores.masked_fill(at::ones({5, 5}, at::kBool).triu(1), -1e300);
  at::Tensor expected = at::matmul(scores.softmax(-1), values);
  at::Tensor got = SoftCappedAttention(in.q, in.k, in.v, in.bias, scale, cap);
  EXPECT_LT((got.to(at::kDouble) - expected).abs().max().item<double>(), 1e-5);
  // The cap changes the answer: scores of this size exceed it.
  at::Tensor uncapped =
      ScaledDotProductAttention(in.q, in.k, in.v, in.bias, scale);
  EXPECT_GT((got - uncapped).abs().max().item<double>(), 1e-2);
}

TEST(SoftCappedAttentionTest, AHugeCapIsPlainAttention) {
  const Inputs in = MakeInputs();
  at::Tensor capped = SoftCappedAttention(in.q, in.k, in.v, in.bias, 0.3, 1e6);
  at::Tensor plain = ScaledDotProductAttention(in.q, in.k, in.v, in.bias, 0.3);
  EXPECT_LT((capped - plain).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace castserve::models
