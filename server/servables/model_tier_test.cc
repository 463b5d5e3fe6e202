// ModelTier: a move down frees what the tier drops; a move up starts a
// promotion off the caller's thread that builds it back while forwards run;
// the next move cancels a promotion that is still running.
#include "server/servables/model_tier.h"

#include <memory>
#include <string>

#include "casting/memory/footprint.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"
#include "server/servables/batching/batching_served_model.h"

namespace castserve {
namespace {

constexpr char kLlama[] = "models/testdata/llama";

models::NamedTensors Inputs() {
  auto reference = models::test_util::ReadSafetensors(std::string(kLlama) +
                                                      "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  models::NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask"}) {
    inputs[name] = reference->at(std::string("input.") + name);
  }
  return inputs;
}

class ModelTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = models::LoadHfModel(kLlama, {});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto hot = model_->Forward(Inputs());
    ASSERT_TRUE(hot.ok()) << hot.status();
    hot_ = *std::move(hot);
    serving_ = ModelFootprint(*model_);
    ASSERT_GT(serving_.owned_bytes(), 0);
  }

  std::shared_ptr<models::Model> model_;
  models::NamedTensors hot_;
  casting::Footprint serving_;
};

TEST_F(ModelTierTest, APromotionBuildsBackWhatTheTierKeeps) {
  ModelTier tier(model_.get());
  EXPECT_EQ(tier.last_promotion().count, 0);
  ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kCool).ok());
  EXPECT_EQ(tier.tier(), casting::WeightTier::kCool);
  EXPECT_EQ(ModelFootprint(*model_).owned_bytes(), 0);
  EXPECT_EQ(tier.last_promotion().count, 0) << "a move down is not timed";

  ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kHot).ok());
  EXPECT_EQ(tier.tier(), casting::WeightTier::kHot);
  EXPECT_TRUE(tier.WaitForPromotion().ok());
  const ServedModel::PromotionTiming timing = tier.last_promotion();
  EXPECT_EQ(timing.count, 1);
  EXPECT_EQ(timing.from, casting::WeightTier::kCool);
  EXPECT_EQ(timing.to, casting::WeightTier::kHot);
  EXPECT_GT(timing.took, absl::ZeroDuration());
  // Built by the promotion, not by a forward, and credited to it.
  EXPECT_EQ(ModelFootprint(*model_).owned_bytes(), serving_.owned_bytes());
  EXPECT_EQ(timing.bytes, serving_.owned_bytes());
  auto promoted = model_->Forward(Inputs());
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  for (const auto& [name, tensor] : hot_) {
    EXPECT_TRUE(tensor.equal(promoted->at(name))) << name;
  }
}

TEST_F(ModelTierTest, AMoveDownCancelsThePromotionRunning) {
  ModelTier tier(model_.get());
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kCool).ok());
    ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kHot).ok());
    // However far the promotion got, the move down waits for it to stop
    // and then frees everything.
    ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kCool).ok());
    EXPECT_EQ(ModelFootprint(*model_).owned_bytes(), 0) << "round " << round;
  }
  auto cool = model_->Forward(Inputs());
  ASSERT_TRUE(cool.ok()) << cool.status();
  for (const auto& [name, tensor] : hot_) {
    EXPECT_TRUE(tensor.equal(cool->at(name))) << name;
  }
}

TEST_F(ModelTierTest, DestroyingItStopsThePromotion) {
  {
    ModelTier tier(model_.get());
    ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kCool).ok());
    ASSERT_TRUE(tier.MoveTo(casting::WeightTier::kHot).ok());
  }
  // Joined: nothing runs on the model any more, and it still serves.
  auto forward = model_->Forward(Inputs());
  ASSERT_TRUE(forward.ok()) << forward.status();
  for (const auto& [name, tensor] : hot_) {
    EXPECT_TRUE(tensor.equal(forward->at(name))) << name;
  }
}

}  // namespace
}  // namespace castserve
