#include "models/kernels/matmul.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace castserve::models {
namespace {

class MatmulTest : public ::testing::Test {
 protected:
  void TearDown() override { SetF32MatmulKernel(F32MatmulKernel::kAuto); }
  c10::InferenceMode inference_;
};

// Relative max difference: the kernels differ by summation order only.
double RelativeDifference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

TEST_F(MatmulTest, ParsesKernelNames) {
  EXPECT_EQ(*ParseF32MatmulKernel("auto"), F32MatmulKernel::kAuto);
  EXPECT_EQ(*ParseF32MatmulKernel("blas"), F32MatmulKernel::kBlas);
  EXPECT_EQ(*ParseF32MatmulKernel("onednn"), F32MatmulKernel::kOneDnn);
  absl::StatusOr<F32MatmulKernel> bad = ParseF32MatmulKernel("mkl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "unknown f32 matmul kernel 'mkl'; expected auto, blas or onednn");
  for (F32MatmulKernel kernel : {F32MatmulKernel::kAuto, F32MatmulKernel::kBlas,
                                 F32MatmulKernel::kOneDnn}) {
    EXPECT_EQ(*ParseF32MatmulKernel(F32MatmulKernelName(kernel)), kernel);
  }
}

TEST_F(MatmulTest, ForcedKernelIsUsedWithoutMeasuring) {
  for (F32MatmulKernel kernel :
       {F32MatmulKernel::kBlas, F32MatmulKernel::kOneDnn}) {
    SetF32MatmulKernel(kernel);
    const F32MatmulChoice choice = ResolveF32MatmulKernel();
    EXPECT_EQ(choice.kernel, kernel);
    EXPECT_FALSE(choice.measured);
  }
}

TEST_F(MatmulTest, AutoMeasuresBothKernelsAndTakesTheFaster) {
  SetF32MatmulKernel(F32MatmulKernel::kAuto);
  const F32MatmulChoice choice = ResolveF32MatmulKernel();
  ASSERT_TRUE(choice.measured);
  EXPECT_GT(choice.blas_us, 0);
  EXPECT_GT(choice.onednn_us, 0);
  if (choice.kernel == F32MatmulKernel::kOneDnn) {
    EXPECT_LT(choice.onednn_us, choice.blas_us);
  } else {
    EXPECT_EQ(choice.kernel, F32MatmulKernel::kBlas);
  }
  // Measured once: a second call returns the same figures.
  const F32MatmulChoice again = ResolveF32MatmulKernel();
  EXPECT_EQ(again.blas_us, choice.blas_us);
  EXPECT_EQ(again.onednn_us, choice.onednn_us);
}

TEST_F(MatmulTest, EveryKernelComputesTheLinearProduct) {
  at::manual_seed(0);
  const at::Tensor weight = at::randn({48, 32});
  const at::Tensor bias = at::randn({48});
  // Rows above and below kOneDnnMinRows, batched, and a non-contiguous view.
  const std::vector<at::Tensor> inputs = {
      at::randn({64, 32}), at::randn({3, 32}), at::randn({2, 40, 32}),
      at::randn({32, 64}).t()};
  for (F32MatmulKernel kernel :
       {F32MatmulKernel::kBlas, F32MatmulKernel::kOneDnn}) {
    SetF32MatmulKernel(kernel);
    for (const at::Tensor& x : inputs) {
      for (const at::Tensor& b : {bias, at::Tensor()}) {
        const at::Tensor expected = at::linear(x, weight, b);
        const at::Tensor got = LinearProduct(x, weight, b);
        ASSERT_EQ(got.sizes(), expected.sizes());
        EXPECT_LT(RelativeDifference(got, expected), 1e-5)
            << F32MatmulKernelName(kernel) << " x " << x.sizes();
      }
    }
  }
}

TEST_F(MatmulTest, ActivationsAreAppliedFusedOrNot) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({40, 24});
  const at::Tensor weight = at::randn({16, 24});
  const at::Tensor bias = at::randn({16});
  const at::Tensor product = at::linear(x, weight, bias);
  for (Activation activation :
       {Activation::kGelu, Activation::kGeluTanh, Activation::kQuickGelu,
        Activation::kSilu, Activation::kRelu}) {
    const at::Tensor expected = Activate(activation, product);
    for (F32MatmulKernel kernel :
         {F32MatmulKernel::kBlas, F32MatmulKernel::kOneDnn}) {
      SetF32MatmulKernel(kernel);
      EXPECT_LT(RelativeDifference(LinearProduct(x, weight, bias, activation),
                                   expected),
                1e-5)
          << F32MatmulKernelName(kernel) << " activation "
          << static_cast<int>(activation);
    }
    // bf16: within bf16's resolution of the f32 result of the same inputs.
    const at::Tensor x16 = x.to(at::kBFloat16);
    const at::Tensor w16 = weight.to(at::kBFloat16);
    const at::Tensor b16 = bias.to(at::kBFloat16);
    const at::Tensor reference = Activate(
        activation,
        at::linear(x16.to(at::kFloat), w16.to(at::kFloat), b16.to(at::kFloat)));
    const at::Tensor got = LinearProduct(x16, w16, b16, activation);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_LT(RelativeDifference(got.to(at::kFloat), reference), 1e-2)
        << "bf16 activation " << static_cast<int>(activation);
  }
}

// The kernel's own flag names (/proc/cpuinfo) against what cpuinfo, through
// LibTorch, told matmul.cc: a misspelt capability key reads as "absent".
TEST_F(MatmulTest, ReducedPrecisionOnOneDnnFollowsTheCpuFlags) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  ASSERT_TRUE(cpuinfo.good());
  std::string line;
  std::set<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string flag; words >> flag;) flags.insert(flag);
    break;
  }
  ASSERT_FALSE(flags.empty());
  const bool expected = flags.count("avx512bw") && flags.count("avx512vl") &&
                        flags.count("avx512dq");
  EXPECT_EQ(OneDnnRunsReducedPrecision(), expected);
}

TEST_F(MatmulTest, DoublesAndEmptyInputsStayOnAtLinear) {
  SetF32MatmulKernel(F32MatmulKernel::kOneDnn);
  at::manual_seed(1);
  const at::Tensor x = at::randn({32, 16}).to(at::kDouble);
  const at::Tensor weight = at::randn({8, 16}).to(at::kDouble);
  EXPECT_TRUE(
      at::equal(LinearProduct(x, weight, at::Tensor()), at::linear(x, weight)));
  const at::Tensor empty = at::zeros({0, 16});
  EXPECT_EQ(LinearProduct(empty, at::randn({8, 16}), at::Tensor()).sizes(),
            (std::vector<int64_t>{0, 8}));
}

}  // namespace
}  // namespace castserve::models
