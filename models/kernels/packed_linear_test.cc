#include "models/kernels/packed_linear.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <optional>

#include "c10/util/Exception.h"
#include "models/layers/activation.h"

namespace castserve::models {
namespace {

// Relative max difference: packed and plain differ by summation order only.
double RelativeDifference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

class PackedLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(PackedLinear::Available()) << "LibTorch without oneDNN";
    at::manual_seed(3);
  }
  c10::InferenceMode inference_;
};

TEST_F(PackedLinearTest, EqualsLinearAtEveryRowCount) {
  const at::Tensor weight = at::randn({96, 40});
  const at::Tensor bias = at::randn({96});
  const PackedLinear packed = PackedLinear::Pack(weight, bias);
  EXPECT_EQ(packed.in_features(), 40);
  EXPECT_EQ(packed.out_features(), 96);
  for (int64_t rows : {1, 3, 16, 130}) {
    const at::Tensor x = at::randn({2, rows, 40});
    const at::Tensor y = packed.Apply(x);
    ASSERT_EQ(y.sizes(), (at::IntArrayRef{2, rows, 96}));
    EXPECT_LT(RelativeDifference(y, at::linear(x, weight, bias)), 1e-5)
        << rows << " rows";
  }
}

TEST_F(PackedLinearTest, WithoutBias) {
  const at::Tensor weight = at::randn({24, 32});
  const at::Tensor x = at::randn({5, 32});
  EXPECT_LT(
      RelativeDifference(PackedLinear::Pack(weight, at::Tensor()).Apply(x),
                         at::linear(x, weight)),
      1e-5);
}

TEST_F(PackedLinearTest, FusesEachActivation) {
  const at::Tensor weight = at::randn({64, 48});
  const at::Tensor bias = at::randn({64});
  const at::Tensor x = at::randn({17, 48});
  const PackedLinear packed = PackedLinear::Pack(weight, bias);
  for (Activation activation :
       {Activation::kGelu, Activation::kGeluTanh, Activation::kQuickGelu,
        Activation::kSilu, Activation::kRelu}) {
    EXPECT_LT(
        RelativeDifference(packed.Apply(x, activation),
                           Activate(activation, at::linear(x, weight, bias))),
        1e-5)
        << static_cast<int>(activation);
  }
}

TEST_F(PackedLinearTest, ReadsNonContiguousInput) {
  const at::Tensor weight = at::randn({8, 16});
  const at::Tensor x = at::randn({16, 6}).t();  // [6, 16], transposed
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_LT(
      RelativeDifference(PackedLinear::Pack(weight, at::Tensor()).Apply(x),
                         at::linear(x, weight)),
      1e-5);
}

TEST_F(PackedLinearTest, KeepsNoReferenceToThePlainWeight) {
  at::Tensor weight = at::randn({8, 16});
  const at::Tensor expected = at::linear(at::ones({1, 16}), weight);
  const PackedLinear packed = PackedLinear::Pack(weight, at::Tensor());
  weight.zero_();
  EXPECT_LT(RelativeDifference(packed.Apply(at::ones({1, 16})), expected),
            1e-5);
}

TEST_F(PackedLinearTest, RefusesAnotherDtype) {
  try {
    PackedLinear::Pack(at::randn({4, 4}).to(at::kBFloat16), at::Tensor());
    FAIL() << "packed a bf16 weight";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace())
                  .find("weight must be a 2-D f32 CPU tensor, got BFloat16"),
              std::string::npos)
        << error.what_without_backtrace();
  }
}

}  // namespace
}  // namespace castserve::models
