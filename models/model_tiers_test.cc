// Memory tiers on a loaded model (Model::Demote, Model::Promote): in every
// tier a weight policy reaches, the same inputs give bitwise the same outputs,
// demoting frees what the tier drops, and a forward or a promotion builds it
// back. A cool model whose storage is the checkpoint's own bytes serves from
// the mapping until it is promoted; a promotion runs beside forwards and
// stops when cancelled.
#include <ATen/ATen.h>

#include <atomic>
#include <filesystem>
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
constexpr char kLlama[] = "models/testdata/llama";

bool NeverCancelled() { return false; }

std::vector<casting::Weight*> WeightsOf(Model& model) {
  std::vector<casting::Weight*> weights;
  model.root().Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      weights.push_back(weight.get());
    }
  });
  return weights;
}

casting::Footprint Held(Model& model) {
  casting::Footprint held;
  for (casting::Weight* weight : WeightsOf(model)) held += weight->footprint();
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
    // What hot keeps after this forward: one this small reads the storage of
    // cast products and makes no cached copy
    // (models/kernels/storage_product.h), so a promotion makes none either.
    ASSERT_TRUE(
        (*model)->Promote(casting::WeightTier::kHot, NeverCancelled).ok());
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
    ASSERT_TRUE(
        (*model)->Promote(casting::WeightTier::kHot, NeverCancelled).ok());
    EXPECT_EQ(Held(**model).owned_bytes(), serving.owned_bytes())
        << policy.name << ": promoted back by the forward and Promote";
    auto promoted = (*model)->Forward(inputs);
    ASSERT_TRUE(promoted.ok()) << policy.name << ": " << promoted.status();

    for (const auto& [name, tensor] : *hot) {
      EXPECT_TRUE(tensor.equal(warm->at(name))) << policy.name << " " << name;
      EXPECT_TRUE(tensor.equal(cool->at(name))) << policy.name << " " << name;
      EXPECT_TRUE(tensor.equal(promoted->at(name)))
          << policy.name << " " << name;
    }
  }
}

// The Llama fixture with every tensor in bf16, in a scratch folder.
std::string Bf16Llama() {
  const std::string dir = test_util::MakeScratchDir("llama_bf16");
  std::map<std::string, at::Tensor> tensors;
  for (const char* shard : {"/model-00001-of-00002.safetensors",
                            "/model-00002-of-00002.safetensors"}) {
    auto read = test_util::ReadSafetensors(std::string(kLlama) + shard);
    EXPECT_TRUE(read.ok()) << read.status();
    for (auto& [name, tensor] : *read) tensors[name] = tensor.to(at::kBFloat16);
  }
  EXPECT_TRUE(
      test_util::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  std::filesystem::copy_file(std::string(kLlama) + "/config.json",
                             dir + "/config.json");
  return dir;
}

// One sequence of 4 tokens: every product of a decoder layer reads storage
// (models/kernels/storage_product.h), as a decode step's do.
NamedTensors ShortLlamaInputs() {
  auto reference = test_util::ReadSafetensors(std::string(kLlama) +
                                              "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask"}) {
    inputs[name] = reference->at(std::string("input.") + name)
                       .slice(0, 0, 1)
                       .slice(1, 0, 4)
                       .contiguous();
  }
  return inputs;
}

struct Checkpoint {
  std::string name;
  std::string dir;
  WeightPolicyOptions options;
};

// Resident storage that is the checkpoint's own bytes: f32 as f32, bf16 as
// bf16 computed in bf16, bf16 as bf16 computed in f32 (transient copies);
// and f32 widened from a bf16 file, computed in f32.
std::vector<Checkpoint> ServesMappedWhenCool() {
  std::vector<Checkpoint> checkpoints;
  checkpoints.push_back({"f32", kLlama, {}});
  const std::string bf16 = Bf16Llama();
  // F32 storage widened from the file: products read the mapped bf16.
  checkpoints.push_back({"bf16 stored and computed as f32", bf16, {}});
  checkpoints.push_back({"bf16 computed in bf16", bf16, {}});
  checkpoints.back().options.compute_dtype = casting::ElementType::kBF16;
  casting::CastingPolicy::Options cast;
  cast.storage_dtype = casting::ElementType::kBF16;
  cast.compute_dtype = casting::ElementType::kF32;
  checkpoints.push_back({"bf16 computed in f32", bf16, {}});
  checkpoints.back().options.casting = *casting::CastingPolicy::Create(cast);
  checkpoints.back().options.compute_copy =
      casting::ComputeCopyPolicy::kTransient;
  return checkpoints;
}

int ServingMapped(Model& model) {
  int count = 0;
  for (casting::Weight* weight : WeightsOf(model)) {
    count += weight->serving_mapped() ? 1 : 0;
  }
  return count;
}

TEST(ModelTiersTest, ACoolModelServesFromTheMappingUntilPromoted) {
  const NamedTensors inputs = ShortLlamaInputs();
  for (const Checkpoint& checkpoint : ServesMappedWhenCool()) {
    const std::string& name = checkpoint.name;
    auto model = LoadHfModel(checkpoint.dir, checkpoint.options);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status();
    auto hot = (*model)->Forward(inputs);
    ASSERT_TRUE(hot.ok()) << name << ": " << hot.status();
    const casting::Footprint serving = Held(**model);
    ASSERT_GT(serving.owned_bytes(), 0) << name;
    const int weights = static_cast<int>(WeightsOf(**model).size());

    ASSERT_TRUE((*model)->Demote(casting::WeightTier::kCool).ok());
    const int cool_weights = ServingMapped(**model);
    // The norms of the cast policy are kept in f32 from a bf16 source.
    EXPECT_GE(cool_weights, weights * 2 / 3) << name;
    auto cool = (*model)->Forward(inputs);
    ASSERT_TRUE(cool.ok()) << name << ": " << cool.status();
    // The products and the embedding read the mapping; what is made is
    // at most the norms' storage (a norm's weight is not a product's).
    const int mapped_after_forward = ServingMapped(**model);
    EXPECT_GE(mapped_after_forward, weights / 2) << name;
    EXPECT_LT(Held(**model).owned_bytes(), serving.owned_bytes() / 10)
        << name << ": " << Held(**model).ToString();

    // Cancelled halfway (a promotion runs last to first): the last half is
    // resident, the rest still mapped, and the outputs the same either way.
    int asked = 0;
    ASSERT_TRUE((*model)
                    ->Promote(casting::WeightTier::kHot,
                              [&] { return ++asked > weights / 2; })
                    .ok());
    EXPECT_EQ(asked, weights / 2 + 1) << name;
    EXPECT_GT(ServingMapped(**model), 0) << name;
    EXPECT_LT(ServingMapped(**model), mapped_after_forward) << name;
    auto partly = (*model)->Forward(inputs);
    ASSERT_TRUE(partly.ok()) << name << ": " << partly.status();

    ASSERT_TRUE(
        (*model)->Promote(casting::WeightTier::kHot, NeverCancelled).ok());
    EXPECT_EQ(ServingMapped(**model), 0) << name;
    EXPECT_EQ(Held(**model).owned_bytes(), serving.owned_bytes()) << name;
    auto promoted = (*model)->Forward(inputs);
    ASSERT_TRUE(promoted.ok()) << name << ": " << promoted.status();
    for (const auto& [output, tensor] : *hot) {
      EXPECT_TRUE(tensor.equal(cool->at(output))) << name << " " << output;
      EXPECT_TRUE(tensor.equal(partly->at(output))) << name << " " << output;
      EXPECT_TRUE(tensor.equal(promoted->at(output))) << name << " " << output;
    }
  }
}

// A promotion in progress holds nothing a forward needs between weights: a
// forward runs to its end while the promotion is paused halfway, with the
// same outputs, and the promotion, cancelled, stops there.
TEST(ModelTiersTest, AForwardDoesNotWaitForAPromotionThatIsCancelled) {
  const NamedTensors inputs = ShortLlamaInputs();
  auto model = LoadHfModel(kLlama, {});
  ASSERT_TRUE(model.ok()) << model.status();
  auto hot = (*model)->Forward(inputs);
  ASSERT_TRUE(hot.ok()) << hot.status();
  ASSERT_TRUE((*model)->Demote(casting::WeightTier::kCool).ok());
  const int weights = static_cast<int>(WeightsOf(**model).size());

  absl::Notification halfway;
  absl::Notification resume;
  std::atomic<bool> cancel{false};
  std::atomic<int> asked{0};
  absl::Status promoted;
  std::thread promotion([&] {
    promoted = (*model)->Promote(casting::WeightTier::kHot, [&] {
      if (++asked == weights / 2) {
        halfway.Notify();
        resume.WaitForNotification();
      }
      return cancel.load();
    });
  });
  halfway.WaitForNotification();
  auto during = (*model)->Forward(inputs);
  ASSERT_TRUE(during.ok()) << during.status();
  const int mapped_during = ServingMapped(**model);
  EXPECT_GT(mapped_during, 0);
  cancel = true;
  resume.Notify();
  promotion.join();
  EXPECT_TRUE(promoted.ok()) << promoted;
  EXPECT_EQ(asked.load(), weights / 2);
  EXPECT_EQ(ServingMapped(**model), mapped_during);
  for (const auto& [output, tensor] : *hot) {
    EXPECT_TRUE(tensor.equal(during->at(output))) << output;
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

// A demotion holds forwards off only while it takes the memory out of the
// weights, not while it frees it (slow for large weights): everything it
// took is in `released`, and a forward runs on the demoted model, with the
// same outputs, while that memory is still held.
TEST(ModelTiersTest, ForwardsRunBeforeADemotionHasFreedItsMemory) {
  const NamedTensors inputs = BertInputs();
  for (const Policy& policy : Policies()) {
    auto model = LoadHfModel(kBert, policy.options);
    ASSERT_TRUE(model.ok()) << policy.name << ": " << model.status();
    auto hot = (*model)->Forward(inputs);
    ASSERT_TRUE(hot.ok()) << policy.name << ": " << hot.status();
    const casting::Footprint serving = Held(**model);
    ASSERT_GT(serving.owned_bytes(), 0) << policy.name;

    casting::ReleasedMemory released;
    ASSERT_TRUE((*model)->Demote(casting::WeightTier::kCool, &released).ok());
    EXPECT_EQ(Held(**model).owned_bytes(), 0) << policy.name;
    EXPECT_GE(released.tensor_bytes(), serving.owned_bytes()) << policy.name;
    auto cool = (*model)->Forward(inputs);
    ASSERT_TRUE(cool.ok()) << policy.name << ": " << cool.status();
    for (const auto& [name, tensor] : *hot) {
      EXPECT_TRUE(tensor.equal(cool->at(name))) << policy.name << " " << name;
    }
  }
}

}  // namespace
}  // namespace castserve::models
