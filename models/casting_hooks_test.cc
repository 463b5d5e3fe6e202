#include "models/casting_hooks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/memory/tracking_allocator.h"
#include "models/kernels/storage_product.h"
#include "models/layers/layers.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

constexpr int kLayers = 6;
constexpr int64_t kWidth = 256;
constexpr int64_t kLayerBytes = kWidth * kWidth * 4;

// Linear layers applied one after the other: "layers.0" ... "layers.N-1".
class Chain : public Module {
 public:
  Chain() : Module("", "Chain") {}
  static std::unique_ptr<Chain> Create(const WeightFactory& factory) {
    return Create(factory, factory, -1);
  }
  // Layer `odd_one` takes its weights from `odd_factory`.
  static std::unique_ptr<Chain> Create(const WeightFactory& factory,
                                       const WeightFactory& odd_factory,
                                       int odd_one) {
    auto chain = std::make_unique<Chain>();
    for (int i = 0; i < kLayers; ++i) {
      chain->layers_.push_back(chain->AddChild(*Linear::Create(
          "layers." + std::to_string(i), i == odd_one ? odd_factory : factory,
          kWidth, kWidth, false)));
    }
    return chain;
  }
  at::Tensor Forward(ForwardContext& context, at::Tensor x) const {
    ModuleCall call(*this, context);
    if (reversed_) {
      for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
        x = (*it)->Forward(context, x);
      }
    } else {
      for (const Linear* layer : layers_) x = layer->Forward(context, x);
    }
    return x;
  }
  // Runs the layers last to first: an execution order unlike the tree's.
  void set_reversed(bool reversed) { reversed_ = reversed; }

 private:
  std::vector<Linear*> layers_;
  bool reversed_ = false;
};

class CastingHooksTest : public ::testing::Test {
 protected:
  // These tests are about the compute copies the hooks make, hold and
  // prefetch; a product that reads the storage makes none
  // (compute_from_storage_test), so every product here takes a copy.
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
    SetStorageProductMaxRows(0);
  }
  static void TearDownTestSuite() {
    SetStorageProductMaxRows(kDefaultStorageProductMaxRows);
  }
  void SetUp() override {
    at::manual_seed(3);
    std::map<std::string, at::Tensor> tensors;
    for (int i = 0; i < kLayers; ++i) {
      weights_.push_back(at::randn({kWidth, kWidth}) / 16);
      tensors["layers." + std::to_string(i) + ".weight"] = weights_.back();
    }
    const std::string path =
        test_util::MakeScratchDir("hooks") + "/model.safetensors";
    ASSERT_TRUE(test_util::WriteSafetensors(path, tensors).ok());
    checkpoint_ = *casting::OpenSafetensors(path);
    input_ = at::randn({1, kWidth});
  }
  WeightFactory Factory(casting::ComputeCopyPolicy copy) const {
    WeightPolicyOptions options;
    options.residency = casting::Residency::kMapped;
    options.compute_copy = copy;
    return WeightFactory(checkpoint_, options);
  }
  std::unique_ptr<Chain> MakeChain(casting::ComputeCopyPolicy copy) {
    return Chain::Create(Factory(copy));
  }
  at::Tensor Reference() const {
    at::Tensor x = input_;
    for (const at::Tensor& w : weights_) x = at::matmul(x, w.t());
    return x;
  }
  // Transient bytes held by all weights of `chain` right now.
  static int64_t TransientBytes(Chain& chain) {
    int64_t bytes = 0;
    chain.Visit([&](Module& module) {
      for (const auto& [name, weight] : module.weights()) {
        bytes += weight->footprint().transient_compute_bytes();
      }
    });
    return bytes;
  }

  std::vector<at::Tensor> weights_;
  std::shared_ptr<const casting::Checkpoint> checkpoint_;
  at::Tensor input_;
};

// Adds to every Linear a pre-hook (after the casting hooks) that records how
// many modules hold copies and how many transient bytes exist, then sleeps
// `delay` (a slow layer, giving the prefetch thread time).
void Probe(Chain& chain, std::vector<int>* holding,
           std::vector<int64_t>* transient_bytes,
           absl::Duration delay = absl::ZeroDuration()) {
  chain.Visit([&](Module& module) {
    if (module.kind() != "Linear") return;
    module.AddPreForwardHook([&chain, holding, transient_bytes, delay](
                                 const Module&, ForwardContext& context) {
      holding->push_back(context.modules_holding());
      int64_t bytes = 0;
      chain.Visit([&](Module& m) {
        for (const auto& [name, w] : m.weights()) {
          bytes += w->footprint().transient_compute_bytes();
        }
      });
      transient_bytes->push_back(bytes);
      absl::SleepFor(delay);
    });
  });
}

TEST_F(CastingHooksTest, OnlyTheRunningModuleHoldsTransientCopies) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  auto hooks = CastingHooks::Attach(*chain, {});
  std::vector<int> holding;
  std::vector<int64_t> transient_bytes;
  Probe(*chain, &holding, &transient_bytes);
  ForwardContext context;
  at::Tensor y = chain->Forward(context, input_);
  EXPECT_LT(test_util::RelativeMaxError(y, Reference()), 1e-5);
  ASSERT_EQ(holding.size(), static_cast<size_t>(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(holding[i], 1) << "layer " << i;
    EXPECT_EQ(transient_bytes[i], kLayerBytes) << "layer " << i;
  }
  EXPECT_EQ(context.modules_holding(), 0);
  EXPECT_EQ(TransientBytes(*chain), 0);
}

TEST_F(CastingHooksTest, PeakMemoryIsOneLayerWhateverTheDepth) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  auto hooks = CastingHooks::Attach(*chain, {});
  casting::PeakScope scope;
  {
    ForwardContext context;
    chain->Forward(context, input_);
  }
  scope.Stop();
  ASSERT_TRUE(scope.exact());
  // One layer's copy plus activations and matmul scratch (well under a
  // second layer).
  EXPECT_GE(scope.peak_increase_bytes(), kLayerBytes);
  EXPECT_LT(scope.peak_increase_bytes(), kLayerBytes + kLayerBytes / 2);
}

TEST_F(CastingHooksTest, RemovedHooksLeaveAModelThatComputes) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  auto hooks = CastingHooks::Attach(*chain, {});
  hooks->Remove();
  ForwardContext context;
  at::Tensor y = chain->Forward(context, input_);
  EXPECT_LT(test_util::RelativeMaxError(y, Reference()), 1e-5);
  // Without the hooks, Param holds every copy until the forward ends.
  EXPECT_EQ(context.modules_holding(), kLayers);
}

TEST_F(CastingHooksTest, PrefetchLearnsOrderAndHoldsAtMostTwoLayers) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  std::vector<int> holding;
  std::vector<int64_t> transient_bytes;
  Probe(*chain, &holding, &transient_bytes, absl::Milliseconds(20));
  for (int pass = 0; pass < 3; ++pass) {
    ForwardContext context;
    at::Tensor y = chain->Forward(context, input_);
    EXPECT_LT(test_util::RelativeMaxError(y, Reference()), 1e-5);
  }
  std::vector<const Module*> order = hooks->execution_order();
  ASSERT_EQ(order.size(), static_cast<size_t>(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(order[i]->name(), "layers." + std::to_string(i));
  }
  // Every forward, the first one too (in the tree's order), prefetches
  // layers 1..N-1.
  EXPECT_EQ(hooks->prefetches_started(), 3 * (kLayers - 1));
  // Each prefetched layer was claimed by its forward, ready or not.
  const PrefetchCounts counts = hooks->prefetch_counts();
  EXPECT_EQ(counts.hits + counts.misses, 3 * (kLayers - 1));
  EXPECT_GT(counts.hits, 0) << "20 ms layers leave the prefetch thread time";
  for (size_t i = 0; i < holding.size(); ++i) {
    EXPECT_EQ(holding[i], 1);
    EXPECT_LE(transient_bytes[i], 2 * kLayerBytes);
  }
  hooks.reset();
  EXPECT_EQ(TransientBytes(*chain), 0);
}

TEST_F(CastingHooksTest, PrefetchFollowsTheTreeUntilItLearnsTheRealOrder) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  chain->set_reversed(true);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  ASSERT_EQ(hooks->execution_order().size(), static_cast<size_t>(kLayers));
  EXPECT_EQ(hooks->execution_order().front()->name(), "layers.0");
  at::Tensor reference = input_;
  for (auto it = weights_.rbegin(); it != weights_.rend(); ++it) {
    reference = at::matmul(reference, it->t());
  }
  for (int pass = 0; pass < 2; ++pass) {
    ForwardContext context;
    EXPECT_LT(
        test_util::RelativeMaxError(chain->Forward(context, input_), reference),
        1e-5);
    // The first forward's wrong-order prefetches were dropped once every
    // layer had run, queued or done: no copy waits for the next forward
    // (given time, the prefetch thread would have made queued ones).
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(TransientBytes(*chain), 0) << "pass " << pass;
  }
  const std::vector<const Module*> order = hooks->execution_order();
  ASSERT_EQ(order.size(), static_cast<size_t>(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(order[i]->name(), "layers." + std::to_string(kLayers - 1 - i));
  }
  hooks.reset();
  EXPECT_EQ(TransientBytes(*chain), 0) << "wrong-order prefetches dropped";
}

TEST_F(CastingHooksTest, PrefetchOverlapsTheLazyUpcastOfTheFirstForwardOnly) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kCached);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  for (int pass = 0; pass < 3; ++pass) {
    ForwardContext context;
    EXPECT_LT(test_util::RelativeMaxError(chain->Forward(context, input_),
                                          Reference()),
              1e-5);
    // The first forward schedules layers 1..N-1 (each claimed by its layer,
    // ready or not); cached copies exist after it: nothing left to fetch.
    const PrefetchCounts counts = hooks->prefetch_counts();
    EXPECT_EQ(counts.hits + counts.misses, kLayers - 1) << "pass " << pass;
  }
  chain->Visit([](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      EXPECT_EQ(weight->compute_builds(), 1) << module.name();
    }
  });
}

TEST_F(CastingHooksTest, PrefetchedCopiesCountForTheModelThatAskedForThem) {
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  ASSERT_TRUE(allocator->RegisterModel("hooked").ok());
  {
    auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
    CastingHooks::Options options;
    options.prefetch = true;
    auto hooks = CastingHooks::Attach(*chain, options);
    std::vector<int> holding;
    std::vector<int64_t> transient_bytes;
    // Slow layers: each prefetch finishes while its predecessor runs, so
    // two layers' copies are live at once, one made on the prefetch thread.
    Probe(*chain, &holding, &transient_bytes, absl::Milliseconds(20));
    casting::ScopedModelTag tag("hooked");
    for (int pass = 0; pass < 2; ++pass) {
      ForwardContext context;
      chain->Forward(context, input_);
    }
    ASSERT_GT(hooks->prefetch_counts().hits, 0);
    absl::StatusOr<casting::ModelMemoryUsage> usage =
        allocator->GetModelUsage("hooked");
    ASSERT_TRUE(usage.ok());
    EXPECT_GE(usage->peak_bytes, 2 * kLayerBytes);
  }
  ASSERT_TRUE(allocator->UnregisterModel("hooked").ok());
}

TEST_F(CastingHooksTest, PrefetchPassesOverLayersWithNothingToBuild) {
  // layers.1 keeps a cached copy after its first use: once built, nothing
  // is left to prefetch for it, so layers.0 starts the decode of layers.2.
  auto chain = Chain::Create(Factory(casting::ComputeCopyPolicy::kTransient),
                             Factory(casting::ComputeCopyPolicy::kCached), 1);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  Module* layer0 = nullptr;
  Module* layer2 = nullptr;
  chain->Visit([&](Module& module) {
    if (module.name() == "layers.0") layer0 = &module;
    if (module.name() == "layers.2") layer2 = &module;
  });
  ASSERT_NE(layer0, nullptr);
  ASSERT_NE(layer2, nullptr);
  // layers.0 is slow; when it ends, has layers.2's copy been made?
  layer0->AddPreForwardHook([](const Module&, ForwardContext&) {
    absl::SleepFor(absl::Milliseconds(20));
  });
  std::vector<int64_t> layer2_bytes_after_layer0;
  layer0->AddPostForwardHook([&](const Module&, ForwardContext&) {
    layer2_bytes_after_layer0.push_back(
        layer2->weights().at("weight")->footprint().transient_compute_bytes());
  });
  for (int pass = 0; pass < 3; ++pass) {
    ForwardContext context;
    EXPECT_LT(test_util::RelativeMaxError(chain->Forward(context, input_),
                                          Reference()),
              1e-5);
  }
  ASSERT_EQ(layer2_bytes_after_layer0.size(), 3u);
  // The first forward still has layers.1 to build: layers.2 waits its turn.
  EXPECT_EQ(layer2_bytes_after_layer0[0], 0);
  EXPECT_EQ(layer2_bytes_after_layer0[1], kLayerBytes);
  EXPECT_EQ(layer2_bytes_after_layer0[2], kLayerBytes);
  hooks.reset();
  EXPECT_EQ(TransientBytes(*chain), 0);
}

TEST_F(CastingHooksTest, PrefetchPeakIsAtMostTwoLayers) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  {
    ForwardContext context;
    chain->Forward(context, input_);  // Learns the order.
  }
  casting::PeakScope scope;
  {
    ForwardContext context;
    chain->Forward(context, input_);
  }
  scope.Stop();
  EXPECT_LT(scope.peak_increase_bytes(), 2 * kLayerBytes + kLayerBytes / 2);
}

TEST_F(CastingHooksTest, RemovingHooksReturnsTrackedBytes) {
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  const int64_t before = allocator->AllocatedBytes();
  {
    auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
    CastingHooks::Options options;
    options.prefetch = true;
    auto hooks = CastingHooks::Attach(*chain, options);
    for (int pass = 0; pass < 2; ++pass) {
      ForwardContext context;
      chain->Forward(context, input_);
    }
    hooks->Remove();
    EXPECT_EQ(TransientBytes(*chain), 0);
  }
  EXPECT_EQ(allocator->AllocatedBytes(), before);
}

TEST_F(CastingHooksTest, ConcurrentForwardsWithPrefetchAgree) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kTransient);
  CastingHooks::Options options;
  options.prefetch = true;
  auto hooks = CastingHooks::Attach(*chain, options);
  const at::Tensor reference = Reference();
  std::vector<double> errors(4, 1.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      double worst = 0;
      for (int pass = 0; pass < 10; ++pass) {
        ForwardContext context;
        worst =
            std::max(worst, test_util::RelativeMaxError(
                                chain->Forward(context, input_), reference));
      }
      errors[t] = worst;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (double error : errors) EXPECT_LT(error, 1e-5);
  hooks.reset();
  EXPECT_EQ(TransientBytes(*chain), 0);
}

TEST_F(CastingHooksTest, CachedCopiesAreBuiltOnce) {
  auto chain = MakeChain(casting::ComputeCopyPolicy::kCached);
  auto hooks = CastingHooks::Attach(*chain, {});
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  {
    ForwardContext context;
    chain->Forward(context, input_);
  }
  const int64_t after_first = allocator->AllocatedBytes();
  casting::PeakScope scope;
  {
    ForwardContext context;
    chain->Forward(context, input_);
  }
  scope.Stop();
  EXPECT_EQ(allocator->AllocatedBytes(), after_first);
  EXPECT_LT(scope.peak_increase_bytes(), kLayerBytes / 4);
  chain->Visit([](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      EXPECT_EQ(weight->compute_builds(), 1) << weight->name();
    }
  });
}

}  // namespace
}  // namespace castserve::models
