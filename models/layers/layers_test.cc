#include "models/layers/layers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "casting/formats/safetensors_reader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

class LayersTest : public ::testing::Test {
 protected:
  // Writes `tensors` and returns a factory over them.
  WeightFactory Factory(const std::map<std::string, at::Tensor>& tensors,
                        WeightPolicyOptions options = {}) {
    const std::string path =
        test_util::MakeScratchDir("layers") + "/model.safetensors";
    EXPECT_TRUE(test_util::WriteSafetensors(path, tensors).ok());
    return WeightFactory(*casting::OpenSafetensors(path), options);
  }
  void SetUp() override { at::manual_seed(1); }
};

TEST_F(LayersTest, LinearMatchesAtLinear) {
  at::Tensor w = at::randn({6, 4}), b = at::randn({6}), x = at::randn({3, 4});
  WeightFactory factory = Factory({{"fc.weight", w}, {"fc.bias", b}});
  auto linear = Linear::Create("fc", factory, 4, 6, /*bias=*/true);
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ((*linear)->kind(), "Linear");
  ForwardContext context;
  EXPECT_TRUE(at::allclose((*linear)->Forward(context, x), at::linear(x, w, b),
                           1e-6, 1e-6));
}

TEST_F(LayersTest, LinearWithoutBiasAndMissingWeights) {
  at::Tensor w = at::randn({6, 4}), x = at::randn({2, 4});
  WeightFactory factory = Factory({{"fc.weight", w}});
  auto linear = Linear::Create("fc", factory, 4, 6, /*bias=*/false);
  ASSERT_TRUE(linear.ok());
  ForwardContext context;
  EXPECT_TRUE(at::allclose((*linear)->Forward(context, x), at::matmul(x, w.t()),
                           1e-6, 1e-6));
  EXPECT_EQ(Linear::Create("fc", factory, 4, 6, true).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Linear::Create("other", factory, 4, 6, false).status().code(),
            absl::StatusCode::kNotFound);
}

// What every layer's Create returns for a weight of another shape than its
// sizes say: InvalidArgument naming the tensor, the expected and the found
// shape.
std::string ShapeError(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

TEST_F(LayersTest, EveryLayerChecksItsWeightShapes) {
  WeightFactory factory = Factory({{"fc.weight", at::randn({32, 16})},
                                   {"fc.bias", at::randn({6})},
                                   {"rank1.weight", at::randn({6})},
                                   {"emb.weight", at::randn({211, 64})},
                                   {"ln.weight", at::randn({64})},
                                   {"ln.bias", at::randn({32})},
                                   {"conv.weight", at::randn({4, 3, 2, 2})},
                                   {"conv.bias", at::randn({5})}});
  EXPECT_EQ(ShapeError(Linear::Create("fc", factory, 64, 64, false).status()),
            "weight 'fc.weight': expected shape [64, 64], found [32, 16]");
  EXPECT_EQ(ShapeError(Linear::Create("rank1", factory, 4, 6, false).status()),
            "weight 'rank1.weight': expected shape [6, 4], found [6]");
  EXPECT_EQ(ShapeError(Linear::Create("fc", factory, 16, 32, true).status()),
            "weight 'fc.bias': expected shape [32], found [6]");
  EXPECT_EQ(ShapeError(Embedding::Create("emb", factory, 64, 64).status()),
            "weight 'emb.weight': expected shape [64, 64], found [211, 64]");
  EXPECT_EQ(ShapeError(LayerNorm::Create("ln", factory, 32, 1e-5).status()),
            "weight 'ln.weight': expected shape [32], found [64]");
  EXPECT_EQ(ShapeError(LayerNorm::Create("ln", factory, 64, 1e-5).status()),
            "weight 'ln.bias': expected shape [64], found [32]");
  EXPECT_EQ(ShapeError(RMSNorm::Create("ln", factory, 32, 1e-6).status()),
            "weight 'ln.weight': expected shape [32], found [64]");
  Conv2d::Options conv{/*in_channels=*/3, /*out_channels=*/4,
                       /*kernel_size=*/4, /*stride=*/4};
  EXPECT_EQ(ShapeError(Conv2d::Create("conv", factory, conv).status()),
            "weight 'conv.weight': expected shape [4, 3, 4, 4], found "
            "[4, 3, 2, 2]");
  conv.kernel_size = 2;
  EXPECT_EQ(ShapeError(Conv2d::Create("conv", factory, conv).status()),
            "weight 'conv.bias': expected shape [4], found [5]");
  conv.bias = false;
  EXPECT_TRUE(Conv2d::Create("conv", factory, conv).ok());
}

TEST_F(LayersTest, LayerWeightsMustBeFloating) {
  WeightFactory factory =
      Factory({{"emb.weight", at::zeros({10, 3}, at::kLong)}});
  absl::Status status = Embedding::Create("emb", factory, 10, 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("weight 'emb.weight' has dtype I64"),
            std::string::npos)
      << status;
}

TEST_F(LayersTest, EmbeddingLooksUpRowsAndChecksIds) {
  at::Tensor table = at::randn({10, 3});
  WeightFactory factory = Factory({{"emb.weight", table}});
  auto embedding = Embedding::Create("emb", factory, 10, 3);
  ASSERT_TRUE(embedding.ok());
  EXPECT_EQ((*embedding)->num_embeddings(), 10);
  ForwardContext context;
  at::Tensor ids = at::tensor({1, 9, 0, 4}, at::kLong).view({2, 2});
  EXPECT_TRUE(at::equal((*embedding)->Forward(context, ids),
                        at::embedding(table, ids)));
  EXPECT_THROW((*embedding)->Forward(context, at::tensor({10}, at::kLong)),
               c10::IndexError);
  EXPECT_THROW((*embedding)->Forward(context, at::tensor({-1}, at::kLong)),
               c10::IndexError);
  EXPECT_THROW((*embedding)->Forward(context, at::ones({1})), c10::TypeError);
}

// A transient table decodes only the looked-up rows, from the mapping or
// from each storage format, and gives what a lookup in the whole decoded
// table gives.
TEST_F(LayersTest, TransientEmbeddingGathersOnlyTheLookedUpRows) {
  const at::Tensor table = at::randn({64, 8}).to(at::kBFloat16);
  const at::Tensor ids =
      at::tensor({3, 63, 3, 0, 17, 40}, at::kLong).view({2, 3});
  std::vector<WeightPolicyOptions> policies;
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  policies.push_back(mapped);
  for (const char* format : {"F8_E4M3FN:per_row", "F8_E5M2:per_tensor",
                             "F8_E4M3FN", "BF16", "F32"}) {
    casting::CastingPolicy::Options cast;
    const casting::StorageFormat storage =
        *casting::StorageFormat::Parse(format);
    cast.storage_dtype = storage.element;
    cast.scaling = storage.scaling;
    cast.compute_dtype = casting::ElementType::kF32;
    WeightPolicyOptions options;
    options.casting = *casting::CastingPolicy::Create(cast);
    policies.push_back(options);
  }
  for (WeightPolicyOptions options : policies) {
    WeightPolicyOptions whole = options;
    whole.compute_copy = casting::ComputeCopyPolicy::kCached;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    auto gathering = Embedding::Create(
        "emb", Factory({{"emb.weight", table}}, options), 64, 8);
    auto reference = Embedding::Create(
        "emb", Factory({{"emb.weight", table}}, whole), 64, 8);
    ASSERT_TRUE(gathering.ok() && reference.ok());
    EXPECT_TRUE((*gathering)->ReadsOwnWeights());
    // A cached table gathers rows too until its whole copy exists, then
    // looks them up in it.
    casting::Weight& whole_table = *(*reference)->weight("weight");
    EXPECT_TRUE((*reference)->ReadsOwnWeights());
    ASSERT_TRUE(whole_table.Acquire().ok());  // The copy stays, cached.
    EXPECT_TRUE(whole_table.has_compute_copy());
    EXPECT_FALSE((*reference)->ReadsOwnWeights());
    ForwardContext context;
    const at::Tensor rows = (*gathering)->Forward(context, ids);
    EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{2, 3, 8}));
    EXPECT_EQ(rows.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(rows, (*reference)->Forward(context, ids)));
    const casting::Weight& weight = *(*gathering)->weight("weight");
    EXPECT_FALSE(weight.has_compute_copy());
    // F32 storage is the compute dtype: rows are looked up in it. Every
    // other table decodes six rows and never the whole table.
    const bool decoded =
        !options.casting.has_value() ||
        options.casting->options().storage_dtype != casting::ElementType::kF32;
    EXPECT_EQ(weight.activity().transient_compute_bytes,
              decoded ? 6 * 8 * 4 : 0);
    if (decoded) {
      EXPECT_EQ(weight.compute_builds(), 0);
    }
  }
}

// A request never builds a cached table's whole copy to read a few rows:
// it gathers them (the values a lookup in the copy gives) and leaves the
// copy to a tied head's first product or a promotion.
TEST_F(LayersTest, CachedEmbeddingGathersRowsUntilItsCopyIsBuilt) {
  const at::Tensor table = at::randn({64, 8}).to(at::kBFloat16);
  const at::Tensor ids = at::tensor({5, 0, 63}, at::kLong);
  casting::CastingPolicy::Options cast;
  cast.storage_dtype = casting::ElementType::kBF16;
  cast.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(cast);
  options.compute_copy = casting::ComputeCopyPolicy::kCached;
  auto embedding = Embedding::Create(
      "emb", Factory({{"emb.weight", table}}, options), 64, 8);
  ASSERT_TRUE(embedding.ok());
  casting::Weight& weight = *(*embedding)->weight("weight");
  ForwardContext context;
  const at::Tensor gathered = (*embedding)->Forward(context, ids);
  EXPECT_FALSE(weight.has_compute_copy());
  EXPECT_EQ(weight.compute_builds(), 0);
  EXPECT_TRUE(at::equal(gathered, table.to(at::kFloat).index_select(0, ids)));
  {
    absl::StatusOr<casting::ComputeHandle> copy = weight.Acquire();
    ASSERT_TRUE(copy.ok()) << copy.status();
  }
  EXPECT_TRUE(weight.has_compute_copy());
  EXPECT_FALSE((*embedding)->ReadsOwnWeights());
  EXPECT_TRUE(at::equal((*embedding)->Forward(context, ids), gathered));
  EXPECT_EQ(weight.compute_builds(), 1);
}

TEST_F(LayersTest, LayerNormMatchesAtLayerNorm) {
  at::Tensor g = at::randn({5}), b = at::randn({5}), x = at::randn({2, 3, 5});
  WeightFactory factory = Factory({{"ln.weight", g}, {"ln.bias", b}});
  auto norm = LayerNorm::Create("ln", factory, 5, 1e-5);
  ASSERT_TRUE(norm.ok());
  ForwardContext context;
  EXPECT_TRUE(at::allclose((*norm)->Forward(context, x),
                           at::layer_norm(x, {5}, g, b, 1e-5), 1e-5, 1e-6));
}

TEST_F(LayersTest, RMSNormMatchesFormulaAndKeepsInputDtype) {
  at::Tensor g = at::randn({8}), x = at::randn({2, 8});
  WeightFactory factory = Factory({{"norm.weight", g}});
  auto norm = RMSNorm::Create("norm", factory, 8, 1e-6);
  ASSERT_TRUE(norm.ok());
  ForwardContext context;
  at::Tensor expected = g * x / at::sqrt(x.pow(2).mean({-1}, true) + 1e-6);
  EXPECT_TRUE(at::allclose((*norm)->Forward(context, x), expected, 1e-5, 1e-6));

  WeightPolicyOptions bf16;
  bf16.compute_dtype = casting::ElementType::kBF16;
  WeightFactory bf16_factory = Factory({{"norm.weight", g}}, bf16);
  auto bf16_norm = RMSNorm::Create("norm", bf16_factory, 8, 1e-6);
  ForwardContext bf16_context;
  at::Tensor y = (*bf16_norm)->Forward(bf16_context, x.to(at::kBFloat16));
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(y.to(at::kFloat), expected, 2e-2, 2e-2));
}

TEST_F(LayersTest, Conv2dMatchesAtConv2d) {
  at::Tensor w = at::randn({4, 3, 2, 2}), b = at::randn({4});
  at::Tensor x = at::randn({1, 3, 6, 6});
  WeightFactory factory = Factory({{"patch.weight", w}, {"patch.bias", b}});
  Conv2d::Options options;
  options.in_channels = 3;
  options.out_channels = 4;
  options.kernel_size = 2;
  options.stride = 2;
  auto conv = Conv2d::Create("patch", factory, options);
  ASSERT_TRUE(conv.ok());
  ForwardContext context;
  at::Tensor y = (*conv)->Forward(context, x);
  EXPECT_EQ(y.sizes(), at::IntArrayRef({1, 4, 3, 3}));
  EXPECT_TRUE(at::allclose(y, at::conv2d(x, w, b, {2, 2}), 1e-5, 1e-6));
}

TEST_F(LayersTest, ActivationsFollowTheirFormulas) {
  at::Tensor x = at::linspace(-4, 4, 33);
  at::Tensor erf_gelu = 0.5 * x * (1 + at::erf(x / std::sqrt(2.0)));
  at::Tensor tanh_gelu =
      0.5 * x *
      (1 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  auto activate = [&](const char* name) {
    return Activate(*ParseActivation(name), x);
  };
  EXPECT_TRUE(at::allclose(activate("gelu"), erf_gelu, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(activate("gelu_new"), tanh_gelu, 1e-5, 1e-6));
  EXPECT_TRUE(
      at::allclose(activate("gelu_pytorch_tanh"), tanh_gelu, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(activate("quick_gelu"), x * at::sigmoid(1.702 * x),
                           1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(activate("silu"), x * at::sigmoid(x), 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(activate("swish"), x * at::sigmoid(x), 1e-6, 1e-6));
  EXPECT_TRUE(at::equal(activate("relu"), at::clamp_min(x, 0)));
}

TEST_F(LayersTest, UnknownActivationListsSupportedOnes) {
  absl::StatusOr<Activation> unknown = ParseActivation("mish");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("gelu_pytorch_tanh"),
            std::string::npos);
}

}  // namespace
}  // namespace castserve::models
