// Compute from storage at the model level (models/kernels/storage_product.h
// wired through Linear, the tied head and the casting hooks): decode steps of a
// cast decoder read their weights' storage, make no compute copy, and
// generate what the compute-copy path generates.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "casting/casting_policy.h"
#include "casting/weight.h"
#include "gtest/gtest.h"
#include "models/generation/generation.h"
#include "models/kernels/storage_product.h"
#include "models/loading/model_loader.h"
#include "models/module.h"

namespace castserve::models {
namespace {

constexpr std::vector<int64_t>::size_type kNewTokens = 12;

WeightPolicyOptions Cast(const std::string& storage,
                         casting::ElementType compute,
                         casting::ComputeCopyPolicy copies =
                             casting::ComputeCopyPolicy::kTransient) {
  const casting::StorageFormat format = *casting::StorageFormat::Parse(storage);
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = format.element;
  policy.scaling = format.scaling;
  policy.compute_dtype = compute;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = copies;
  options.prefetch = copies == casting::ComputeCopyPolicy::kTransient;
  return options;
}

std::unique_ptr<Model> Load(const std::string& fixture,
                            const WeightPolicyOptions& options) {
  auto model = LoadHfModel("models/testdata/" + fixture, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// The weights of every Linear module (the products' weight matrices).
std::vector<casting::Weight*> LinearWeights(Model& model) {
  std::vector<casting::Weight*> weights;
  model.root().Visit([&weights](Module& module) {
    if (module.kind() == "Linear" && module.weight("weight") != nullptr) {
      weights.push_back(module.weight("weight"));
    }
  });
  return weights;
}

casting::WeightActivity ActivityOf(const std::vector<casting::Weight*>& ws) {
  casting::WeightActivity sum;
  for (const casting::Weight* w : ws) sum += w->activity();
  return sum;
}

// Restores the default limit whatever a test set.
class ComputeFromStorageTest : public ::testing::Test {
 protected:
  void TearDown() override {
    SetStorageProductMaxRows(kDefaultStorageProductMaxRows);
  }
};

std::vector<int64_t> GreedyTokens(const Model& model, int64_t max_rows) {
  SetStorageProductMaxRows(max_rows);
  GenerationOptions options;
  options.max_new_tokens = kNewTokens;
  absl::StatusOr<CheckedGeneration> checked =
      CheckGenerationRequest(model, {5, 17, 42, 9, 101, 3, 77}, options);
  EXPECT_TRUE(checked.ok()) << checked.status();
  if (!checked.ok()) return {};
  auto result = Generate(model, *checked);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->tokens : std::vector<int64_t>();
}

TEST_F(ComputeFromStorageTest, GreedyTokensEqualTheComputeCopyPath) {
  for (const std::string fixture : {"llama", "mistral", "qwen2"}) {
    for (const std::string storage :
         {"F8_E4M3FN:per_row", "F8_E5M2:per_tensor", "BF16"}) {
      std::unique_ptr<Model> model =
          Load(fixture, Cast(storage, casting::ElementType::kF32));
      ASSERT_NE(model, nullptr);
      const std::vector<int64_t> copies = GreedyTokens(*model, 0);
      const std::vector<int64_t> storage_tokens =
          GreedyTokens(*model, kDefaultStorageProductMaxRows);
      ASSERT_EQ(copies.size(), kNewTokens);
      EXPECT_EQ(storage_tokens, copies) << fixture << " " << storage;
    }
  }
}

// Each decode step's logits, from storage and through compute copies.
TEST_F(ComputeFromStorageTest, DecodeLogitsAgreeWithTheComputeCopyPath) {
  struct Case {
    std::string storage;
    casting::ElementType compute;
    double tolerance;
  };
  for (const Case& c :
       {Case{"F8_E4M3FN:per_row", casting::ElementType::kF32, 1e-4},
        Case{"BF16", casting::ElementType::kBF16, 3e-2}}) {
    std::unique_ptr<Model> model = Load("llama", Cast(c.storage, c.compute));
    ASSERT_NE(model, nullptr);
    std::vector<at::Tensor> logits[2];
    for (int path = 0; path < 2; ++path) {
      SetStorageProductMaxRows(path == 0 ? 0 : kDefaultStorageProductMaxRows);
      auto session = DecodeSession::Create(*model, 32);
      ASSERT_TRUE(session.ok()) << session.status();
      for (const std::vector<int64_t>& tokens :
           {std::vector<int64_t>{5, 17, 42}, {9}, {101}, {3}}) {
        auto step = (*session)->Feed(tokens);
        ASSERT_TRUE(step.ok()) << step.status();
        logits[path].push_back(*step);
      }
    }
    for (size_t i = 0; i < logits[0].size(); ++i) {
      const double scale = logits[0][i].abs().max().item<double>();
      EXPECT_LT((logits[0][i] - logits[1][i]).abs().max().item<double>(),
                c.tolerance * scale)
          << c.storage << " step " << i;
    }
  }
}

// After the prefill, decode steps of an fp8-cast Llama with prefetch read
// every Linear's storage: no compute copy is built, by the step or by
// prefetch. The compute-copy path builds one per Linear per step.
TEST_F(ComputeFromStorageTest, DecodeStepsMakeNoComputeCopies) {
  std::unique_ptr<Model> model =
      Load("llama", Cast("F8_E4M3FN:per_row", casting::ElementType::kF32));
  ASSERT_NE(model, nullptr);
  const std::vector<casting::Weight*> weights = LinearWeights(*model);
  ASSERT_GT(weights.size(), 0u);
  for (int64_t max_rows : {kDefaultStorageProductMaxRows, int64_t{0}}) {
    SetStorageProductMaxRows(max_rows);
    auto session = DecodeSession::Create(*model, 32);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->Feed({5, 17, 42, 9}).ok());
    const casting::WeightActivity before = ActivityOf(weights);
    constexpr int kSteps = 6;
    for (int64_t token : {11, 12, 13, 14, 15, 16}) {
      ASSERT_TRUE((*session)->Feed({token}).ok());
    }
    const casting::WeightActivity after = ActivityOf(weights);
    const int64_t copies =
        after.compute_materializations - before.compute_materializations;
    const int64_t reads = after.storage_reads - before.storage_reads;
    if (max_rows > 0) {
      EXPECT_EQ(copies, 0);
      EXPECT_EQ(after.transient_compute_bytes, before.transient_compute_bytes);
      EXPECT_EQ(reads, kSteps * static_cast<int64_t>(weights.size()));
    } else {
      EXPECT_GE(copies, kSteps * static_cast<int64_t>(weights.size()));
      EXPECT_EQ(reads, 0);
    }
    for (const casting::Weight* weight : weights) {
      EXPECT_FALSE(weight->has_compute_copy()) << weight->name();
    }
  }
}

TEST_F(ComputeFromStorageTest, ReadsStorageOnlyForFewRows) {
  auto first_linear_weight = [](Model& model) {
    return LinearWeights(model).at(0);
  };
  std::unique_ptr<Model> transient =
      Load("llama", Cast("F8_E4M3FN:per_row", casting::ElementType::kF32));
  std::unique_ptr<Model> cached =
      Load("llama", Cast("F8_E4M3FN:per_row", casting::ElementType::kF32,
                         casting::ComputeCopyPolicy::kCached));
  WeightPolicyOptions bf16_resident;
  bf16_resident.compute_dtype = casting::ElementType::kBF16;
  std::unique_ptr<Model> bf16 = Load("llama", bf16_resident);
  std::unique_ptr<Model> f32 = Load("llama", WeightPolicyOptions());
  ASSERT_TRUE(transient && cached && bf16 && f32);
  const casting::Weight& w = *first_linear_weight(*transient);
  EXPECT_TRUE(ReadsStorageFor(w, 1));
  EXPECT_TRUE(ReadsStorageFor(w, kDefaultStorageProductMaxRows));
  EXPECT_FALSE(ReadsStorageFor(w, kDefaultStorageProductMaxRows + 1));
  // Rows not known yet (a forward's first hooks) count as few.
  EXPECT_TRUE(ReadsStorageFor(w, -1));
  SetStorageProductMaxRows(0);
  EXPECT_FALSE(ReadsStorageFor(w, 1));
  SetStorageProductMaxRows(kDefaultStorageProductMaxRows);
  // A cached copy is made for larger products only: fewer rows read the
  // storage (a quarter of the f32 copy's bytes here).
  EXPECT_TRUE(ReadsStorageFor(*first_linear_weight(*cached), 1));
  EXPECT_TRUE(ReadsStorageFor(*first_linear_weight(*cached),
                              kDefaultStorageProductMaxRows));
  EXPECT_FALSE(ReadsStorageFor(*first_linear_weight(*cached),
                               kDefaultStorageProductMaxRows + 1));
  // Resident f32 storage is the copy; the f32 kernel reads it for decode
  // sizes (faster than oneDNN's product there).
  EXPECT_TRUE(ReadsStorageFor(*first_linear_weight(*f32), 1));
  EXPECT_TRUE(ReadsStorageFor(*first_linear_weight(*f32), kResidentF32MaxRows));
  EXPECT_FALSE(
      ReadsStorageFor(*first_linear_weight(*f32), kResidentF32MaxRows + 1));
  // bf16 storage that is the bf16 compute copy: read by the fused kernel
  // up to kStorageIsComputeMaxRows, LibTorch's bf16 product reads it from
  // there.
  EXPECT_TRUE(ReadsStorageFor(*first_linear_weight(*bf16), 1));
  EXPECT_TRUE(
      ReadsStorageFor(*first_linear_weight(*bf16), kStorageIsComputeMaxRows));
  EXPECT_FALSE(ReadsStorageFor(*first_linear_weight(*bf16),
                               kStorageIsComputeMaxRows + 1));
}

}  // namespace
}  // namespace castserve::models
