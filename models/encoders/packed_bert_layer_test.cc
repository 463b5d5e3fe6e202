// The packed BERT layer (packed_bert_layer.h) against the unfused layers it
// replaces, on the BERT fixture transformers wrote; that both match
// transformers is bert_test's MatchesTransformersUnderEveryPlainPolicy.
#include "models/encoders/packed_bert_layer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "models/encoders/encoder_blocks.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

constexpr char kBert[] = "models/testdata/bert";

class PackedBertLayerTest : public ::testing::Test {
 protected:
  void TearDown() override { SetPackedEncoderLayers(true); }

  static NamedTensors ReferenceInputs() {
    auto tensors = test_util::ReadSafetensors(std::string(kBert) +
                                              "/reference.safetensors");
    EXPECT_TRUE(tensors.ok()) << tensors.status();
    NamedTensors inputs;
    if (!tensors.ok()) return inputs;
    for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
      inputs[name] = tensors->at(std::string("input.") + name);
    }
    return inputs;
  }

  static NamedTensors Run(const Model& model, const NamedTensors& inputs,
                          bool packed) {
    SetPackedEncoderLayers(packed);
    absl::StatusOr<NamedTensors> outputs = model.Forward(inputs);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    return outputs.ok() ? *outputs : NamedTensors{};
  }

  static void ExpectClose(const NamedTensors& packed,
                          const NamedTensors& unfused, const char* what) {
    ASSERT_EQ(packed.size(), unfused.size()) << what;
    for (const auto& [name, tensor] : unfused) {
      const double scale = tensor.abs().max().item<double>();
      EXPECT_LT((packed.at(name) - tensor).abs().max().item<double>(),
                1e-5 * scale)
          << what << " " << name;
    }
  }
};

// Counts the forwards of the module named `name` in `model`'s tree.
class ForwardCounter {
 public:
  ForwardCounter(Model& model, const std::string& name) {
    model.root().Visit([&](Module& module) {
      if (module.name() != name) return;
      module.AddPreForwardHook(
          [this](const Module&, ForwardContext&) { ++count_; });
      found_ = true;
    });
  }
  bool found() const { return found_; }
  int count() const { return count_.load(); }

 private:
  bool found_ = false;
  std::atomic<int> count_{0};
};

TEST_F(PackedBertLayerTest, EqualsTheUnfusedLayers) {
  WeightPolicyOptions options;
  options.eager = true;
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, options);
  ASSERT_TRUE(model.ok()) << model.status();
  const NamedTensors inputs = ReferenceInputs();
  // The fixture pads its second sequence: the attention bias path.
  ASSERT_FALSE(inputs.at("attention_mask").ne(0).all().item<bool>());
  const NamedTensors unfused = Run(**model, inputs, false);
  ExpectClose(Run(**model, inputs, true), unfused, "first packed forward");
  ExpectClose(Run(**model, inputs, true), unfused, "second packed forward");
}

TEST_F(PackedBertLayerTest, EqualsTheUnfusedLayersWithoutPadding) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::manual_seed(5);
  const NamedTensors inputs = {{"input_ids", at::randint(0, 90, {3, 7})}};
  ExpectClose(Run(**model, inputs, true), Run(**model, inputs, false),
              "unpadded");
}

TEST_F(PackedBertLayerTest, ConcurrentFirstForwardsPackOnceAndAgree) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  const NamedTensors inputs = ReferenceInputs();
  constexpr int kThreads = 4;
  std::vector<NamedTensors> outputs(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<NamedTensors> out = (*model)->Forward(inputs);
      if (out.ok()) outputs[i] = *std::move(out);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const NamedTensors unfused = Run(**model, inputs, false);
  for (int i = 0; i < kThreads; ++i) {
    ExpectClose(outputs[i], unfused, "concurrent first forward");
  }
}

// The first layer of `model`, or null.
const EncoderLayer* FirstLayer(Model& model) {
  const EncoderLayer* layer = nullptr;
  model.root().Visit([&](Module& module) {
    if (module.name() == "encoder.layer.0") {
      layer = dynamic_cast<const EncoderLayer*>(&module);
    }
  });
  return layer;
}

TEST_F(PackedBertLayerTest, TakesThePackedPathOnlyWithCachedF32Weights) {
  const NamedTensors inputs = ReferenceInputs();
  absl::StatusOr<std::unique_ptr<Model>> cached = LoadHfModel(kBert, {});
  ASSERT_TRUE(cached.ok()) << cached.status();
  const EncoderLayer* layer = FirstLayer(**cached);
  ASSERT_NE(layer, nullptr);
  Run(**cached, inputs, false);
  EXPECT_EQ(layer->packed_bytes(), 0) << "switched off: the unfused layers";
  Run(**cached, inputs, true);
  EXPECT_GT(layer->packed_bytes(), 0);

  // Transient copies have casting hooks on every Linear: never packed.
  WeightPolicyOptions transient;
  transient.compute_copy = casting::ComputeCopyPolicy::kTransient;
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, transient);
  ASSERT_TRUE(model.ok()) << model.status();
  Run(**model, inputs, true);
  ASSERT_NE(FirstLayer(**model), nullptr);
  EXPECT_EQ(FirstLayer(**model)->packed_bytes(), 0);
}

TEST_F(PackedBertLayerTest, DemotionDropsThePackedWeights) {
  const NamedTensors inputs = ReferenceInputs();
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  const EncoderLayer* layer = FirstLayer(**model);
  ASSERT_NE(layer, nullptr);
  const NamedTensors hot = Run(**model, inputs, true);
  const int64_t packed_bytes = layer->packed_bytes();
  ASSERT_GT(packed_bytes, 0);
  ASSERT_TRUE((*model)->Demote(casting::WeightTier::kHot).ok());
  EXPECT_EQ(layer->packed_bytes(), packed_bytes) << "hot keeps everything";
  ASSERT_TRUE((*model)->Demote(casting::WeightTier::kWarm).ok());
  EXPECT_EQ(layer->packed_bytes(), 0);
  const NamedTensors warm = Run(**model, inputs, true);
  EXPECT_EQ(layer->packed_bytes(), packed_bytes) << "packed again";
  for (const auto& [name, tensor] : hot) {
    EXPECT_TRUE(tensor.equal(warm.at(name))) << name;
  }
}

TEST_F(PackedBertLayerTest, HooksInsideTheLayerKeepTheUnfusedPath) {
  const NamedTensors inputs = ReferenceInputs();
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  ForwardCounter query(**model, "encoder.layer.0.attention.self.query");
  ForwardCounter layer(**model, "encoder.layer.0");
  ASSERT_TRUE(query.found() && layer.found());
  const NamedTensors observed = Run(**model, inputs, true);
  EXPECT_EQ(layer.count(), 1);
  EXPECT_EQ(query.count(), 1) << "a hooked Linear runs its own forward";
  EXPECT_EQ(FirstLayer(**model)->packed_bytes(), 0);
  ExpectClose(observed, Run(**model, inputs, false), "observed layer");
}

TEST(PackedBertLayerPolicyTest, PackableOnlyWithoutHooksOrCasting) {
  WeightPolicyOptions options;
  EXPECT_TRUE(EncoderLayer::Packable(options));
  options.prefetch = true;
  EXPECT_FALSE(EncoderLayer::Packable(options));
  options = {};
  options.compute_dtype = casting::ElementType::kBF16;
  EXPECT_FALSE(EncoderLayer::Packable(options));
  options = {};
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  EXPECT_FALSE(EncoderLayer::Packable(options));
}

}  // namespace
}  // namespace castserve::models
