#include "models/loading/weight_factory.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "casting/formats/safetensors_reader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using casting::ElementType;

std::shared_ptr<const casting::Checkpoint> MakeCheckpoint() {
  at::manual_seed(0);
  const std::string path =
      test_util::MakeScratchDir("weight_factory") + "/model.safetensors";
  EXPECT_TRUE(
      test_util::WriteSafetensors(
          path, {{"bert.encoder.dense.weight", at::randn({8, 4})},
                 {"bert.encoder.LayerNorm.weight", at::randn({4})},
                 {"bert.embeddings.word_embeddings.weight", at::randn({10, 4})},
                 {"bert.embeddings.position_ids", at::arange(4, at::kLong)}})
          .ok());
  return *casting::OpenSafetensors(path);
}

casting::CastingPolicy Fp8Policy() {
  casting::CastingPolicy::Options options;
  options.storage_dtype = ElementType::kF8E4M3FN;
  options.compute_dtype = ElementType::kF32;
  options.scaling = casting::Scaling::kPerRow;
  return *casting::CastingPolicy::Create(options);
}

TEST(WeightFactoryTest, CastsLinearButNeverNorms) {
  WeightPolicyOptions options;
  options.casting = Fp8Policy();
  options.residency = casting::Residency::kMapped;
  WeightFactory factory(MakeCheckpoint(), options, "bert.");

  auto linear = factory.Make("encoder.dense", "Linear", "weight", {8, 4});
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ((*linear)->options().storage.element, ElementType::kF8E4M3FN);
  EXPECT_EQ((*linear)->options().storage.scaling, casting::Scaling::kPerRow);
  EXPECT_EQ((*linear)->options().residency, casting::Residency::kResident);

  auto norm = factory.Make("encoder.LayerNorm", "LayerNorm", "weight", {4});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ((*norm)->options().storage,
            casting::StorageFormat::Plain(ElementType::kF32));
  EXPECT_EQ((*norm)->options().residency, casting::Residency::kMapped);
}

TEST(WeightFactoryTest, RMSNormKeepsComputeDtypeUnderBf16Policy) {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = ElementType::kF8E5M2;
  policy.compute_dtype = ElementType::kBF16;
  policy.skip_modules_pattern = {};
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  WeightFactory factory(MakeCheckpoint(), options, "bert.");
  EXPECT_EQ(factory.compute_dtype(), ElementType::kBF16);
  EXPECT_EQ(factory.compute_scalar_type(), at::kBFloat16);
  auto norm = factory.Make("encoder.LayerNorm", "RMSNorm", "weight", {4});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ((*norm)->options().storage,
            casting::StorageFormat::Plain(ElementType::kBF16));
  auto handle = (*norm)->Acquire();
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(handle->tensor().scalar_type(), at::kBFloat16);
}

TEST(WeightFactoryTest, SkipPatternsApplyToModuleNames) {
  WeightPolicyOptions options;
  options.casting = Fp8Policy();  // Default patterns include "pos_embed".
  WeightFactory factory(MakeCheckpoint(), options, "bert.");
  auto embedding = factory.Make("embeddings.word_embeddings", "Embedding",
                                "weight", {10, 4});
  ASSERT_TRUE(embedding.ok());
  EXPECT_EQ((*embedding)->options().storage.element, ElementType::kF8E4M3FN);
}

TEST(WeightFactoryTest, MissingKeyIsNotFoundNamingTheKey) {
  WeightFactory factory(MakeCheckpoint(), {}, "bert.");
  auto missing = factory.Make("encoder.query", "Linear", "weight", {8, 4});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("bert.encoder.query.weight"),
            std::string::npos);
  EXPECT_FALSE(factory.Has("encoder.query", "weight"));
  EXPECT_TRUE(factory.Has("encoder.dense", "weight"));
}

TEST(WeightFactoryTest, WrongShapeNamesTheTensorAndBothShapes) {
  WeightFactory factory(MakeCheckpoint(), {}, "bert.");
  auto query = factory.Make("encoder.dense", "Linear", "weight", {64, 64});
  EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(query.status().message(),
            "weight 'bert.encoder.dense.weight': expected shape [64, 64], "
            "found [8, 4]");
  auto rank = factory.Make("encoder.LayerNorm", "LayerNorm", "weight", {4, 1});
  EXPECT_EQ(rank.status().message(),
            "weight 'bert.encoder.LayerNorm.weight': expected shape [4, 1], "
            "found [4]");
}

// The checks come from the checkpoint header, so they hold whatever the
// policy: a mapped lazy weight fails as an eager one does.
TEST(WeightFactoryTest, ChecksHoldForMappedAndEagerPolicies) {
  for (bool eager : {false, true}) {
    WeightPolicyOptions options;
    options.residency = casting::Residency::kMapped;
    options.eager = eager;
    WeightFactory factory(MakeCheckpoint(), options, "bert.");
    EXPECT_EQ(factory.Make("encoder.dense", "Linear", "weight", {4, 8})
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << "eager=" << eager;
  }
}

TEST(WeightFactoryTest, IntegerTensorIsNoLayerWeight) {
  WeightFactory factory(MakeCheckpoint(), {}, "bert.");
  auto ids = factory.Make("embeddings", "Embedding", "position_ids", {4});
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find(
                "weight 'bert.embeddings.position_ids' has dtype I64"),
            std::string::npos)
      << ids.status();
}

TEST(WeightFactoryTest, EagerPolicyMaterializesAtMake) {
  WeightPolicyOptions options;
  options.eager = true;
  WeightFactory factory(MakeCheckpoint(), options, "bert.");
  auto weight = factory.Make("encoder.dense", "Linear", "weight", {8, 4});
  ASSERT_TRUE(weight.ok());
  EXPECT_EQ((*weight)->footprint().mapped_bytes(), 0);
  EXPECT_EQ((*weight)->footprint().total_resident_bytes(), 8 * 4 * 4);

  WeightFactory lazy(MakeCheckpoint(), {}, "bert.");
  auto lazy_weight = lazy.Make("encoder.dense", "Linear", "weight", {8, 4});
  EXPECT_EQ((*lazy_weight)->footprint().total_resident_bytes(), 0);
}

TEST(WeightFactoryTest, FindKeyPrefixTriesCandidatesInOrder) {
  auto checkpoint = MakeCheckpoint();
  EXPECT_EQ(*FindKeyPrefix(*checkpoint, "encoder.dense.weight", {"", "bert."}),
            "bert.");
  absl::StatusOr<std::string> none =
      FindKeyPrefix(*checkpoint, "encoder.dense.weight", {"", "model."});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("model.encoder.dense.weight"),
            std::string::npos);
}

}  // namespace
}  // namespace castserve::models
