// Memory tiers on a loaded model (Model::Demote): in every tier a weight
// policy reaches, the same inputs give bitwise the same outputs, demoting
// frees what the tier drops, and a forward after it builds it back.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "casting/casting_policy.h"
#include "casting/memory/footprint.h"
#include "casting/weight.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

constexpr char kBert[] = "models/testdata/bert";

casting::Footprint Held(Model& model) {
  casting::Footprint held;
  model.root().Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      held += weight->footprint();
    }
  });
  return held;
}

NamedTensors BertInputs() {
  auto reference =
      test_util::ReadSafetensors(std::string(kBert) + "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    inputs[name] = reference->at(std::string("input.") + name);
  }
  return inputs;
}

struct Policy {
  std::string name;
  WeightPolicyOptions options;
};

std::vector<Policy> Policies() {
  std::vector<Policy> policies;
  policies.push_back({"eager f32", {}});
  policies.back().options.eager = true;
  policies.push_back({"lazy upcast (mapped, cached)", {}});
  policies.back().options.residency = casting::Residency::kMapped;
  for (const char* format : {"F8_E4M3FN:per_row", "BF16"}) {
    auto storage = casting::StorageFormat::Parse(format);
    EXPECT_TRUE(storage.ok()) << storage.status();
    casting::CastingPolicy::Options cast;
    cast.storage_dtype = storage->element;
    cast.scaling = storage->scaling;
    cast.compute_dtype = casting::ElementType::kF32;
    for (auto copy : {casting::ComputeCopyPolicy::kTransient,
                      casting::ComputeCopyPolicy::kCached}) {
      WeightPolicyOptions options;
      options.casting = *casting::CastingPolicy::Create(cast);
      options.compute_copy = copy;
      options.prefetch = copy == casting::ComputeCopyPolicy::kTransient;
      policies.push_back(
          {std::string(format) + (copy == casting::ComputeCopyPolicy::kCached
                                      ? " cached"
                                      : " transient"),
           options});
    }
  }
  return policies;
}

TEST(ModelTiersTest, EveryTierGivesBitwiseTheSameOutputs) {
  const NamedTensors inputs = BertInputs();
  for (const Policy& policy : Policies()) {
    auto model = LoadHfModel(kBert, policy.options);
    ASSERT_TRUE(model.ok()) << policy.name << ": " << model.status();
    auto hot = (*model)->Forward(inputs);
    ASSERT_TRUE(hot.ok()) << policy.name << ": " << hot.status();
    auto hot_again = (*model)->Forward(inputs);
    ASSERT_TRUE(hot_again.ok()) << policy.name << ": " << hot_again.status();
    for (const auto& [name, tensor] : *hot) {
      EXPECT_TRUE(tensor.equal(hot_again->at(name)))
          << policy.name << " " << name << ": hot twice";
    }
    const casting::Footprint serving = Held(**model);

    ASSERT_TRUE((*model)->Demote(casting::WeightTier::kWarm).ok());
    EXPECT_EQ(Held(**model).cached_compute_bytes(), 0) << policy.name;
    EXPECT_EQ(Held(**model).total_resident_bytes(),
              serving.total_resident_bytes())
        << policy.name;
    auto warm = (*model)->Forward(inputs);
    ASSERT_TRUE(warm.ok()) << policy.name << ": " << warm.status();

    ASSERT_TRUE((*model)->Demote(casting::WeightTier::kCool).ok());
    EXPECT_EQ(Held(**model).owned_bytes(), 0)
        << policy.name << ": " << Held(**model).ToString();
    auto cool = (*model)->Forward(inputs);
    ASSERT_TRUE(cool.ok()) << policy.name << ": " << cool.status();
    EXPECT_EQ(Held(**model).owned_bytes(), serving.owned_bytes())
        << policy.name << ": promoted back by the forward";

    for (const auto& [name, tensor] : *hot) {
      EXPECT_TRUE(tensor.equal(warm->at(name))) << policy.name << " " << name;
      EXPECT_TRUE(tensor.equal(cool->at(name))) << policy.name << " " << name;
    }
  }
}

TEST(ModelTiersTest, DemotionWaitsForTheForwardsRunningNow) {
  auto model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->Forward(BertInputs()).ok());
  ASSERT_GT(Held(**model).owned_bytes(), 0);
  absl::Notification demoted;
  std::thread demote;
  {
    const Model::ForwardPass pass = (*model)->EnterForward();
    demote = std::thread([&] {
      EXPECT_TRUE((*model)->Demote(casting::WeightTier::kCool).ok());
      demoted.Notify();
    });
    EXPECT_FALSE(demoted.WaitForNotificationWithTimeout(absl::Seconds(1)))
        << "demoted while a forward ran";
    EXPECT_GT(Held(**model).owned_bytes(), 0);
  }
  demote.join();
  EXPECT_TRUE(demoted.HasBeenNotified());
  EXPECT_EQ(Held(**model).owned_bytes(), 0);
}

}  // namespace
}  // namespace castserve::models
