#include "models/loading/configured_footprint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "casting/casting_policy.h"
#include "models/encoders/packed_bert_layer.h"
#include "models/kernels/storage_product.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

using casting::ComputeCopyPolicy;
using casting::ElementType;
using casting::Footprint;
using casting::Residency;

constexpr char kBert[] = "models/testdata/bert";

NamedTensors Inputs() {
  return {{"input_ids", at::arange(8, at::kLong).view({1, 8})}};
}

WeightPolicyOptions Casting(ElementType storage, ComputeCopyPolicy copy,
                            bool prefetch = false) {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage;
  policy.compute_dtype = ElementType::kF32;
  if (casting::IsFp8(storage)) policy.scaling = casting::Scaling::kPerRow;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = copy;
  options.prefetch = prefetch;
  return options;
}

// The footprint every weight of the model holds now, and what modules
// derived from the weights' copies and keep (as cached compute bytes).
Footprint HeldNow(Module& root) {
  Footprint held;
  root.Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      held += weight->footprint();
    }
    held.AddCachedCompute(module.DerivedBytes());
  });
  return held;
}

std::unique_ptr<Model> Load(const WeightPolicyOptions& options) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(kBert, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// Makes every weight's compute copy, as a forward of more rows than a
// storage product takes would: the cached ones stay.
void UseEveryWeight(Module& root) {
  root.Visit([](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      absl::StatusOr<casting::ComputeHandle> handle = weight->Acquire();
      EXPECT_TRUE(handle.ok()) << name << ": " << handle.status();
    }
  });
}

// Held bytes other than transient copies, as a footprint compares them.
Footprint Kept(const Footprint& footprint) {
  Footprint kept;
  kept.AddMapped(footprint.mapped_bytes());
  for (const auto& [format, bytes] : footprint.resident_bytes_by_format()) {
    kept.AddResident(format, bytes);
  }
  kept.AddCachedCompute(footprint.cached_compute_bytes());
  return kept;
}

TEST(ConfiguredFootprintTest, IsKnownBeforeAnyDataAndEqualsWhatServingHolds) {
  const WeightPolicyOptions policies[] = {
      WeightPolicyOptions{},  // f32, resident, cached.
      Casting(ElementType::kBF16, ComputeCopyPolicy::kCached),
      Casting(ElementType::kF8E4M3FN, ComputeCopyPolicy::kTransient),
      [] {
        WeightPolicyOptions mapped;
        mapped.residency = Residency::kMapped;
        return mapped;
      }(),
  };
  for (const WeightPolicyOptions& options : policies) {
    std::unique_ptr<Model> model = Load(options);
    ASSERT_NE(model, nullptr);
    const Footprint configured =
        ConfiguredFootprint(model->root(), options, /*concurrent_forwards=*/1);
    EXPECT_EQ(HeldNow(model->root()).owned_bytes(), 0)
        << "nothing is read before the first forward";
    ASSERT_TRUE(model->Forward(Inputs()).ok());
    // A forward this small reads the storage of cast products and makes no
    // cached copy (models/kernels/storage_product.h); a forward of more rows
    // makes them all.
    UseEveryWeight(model->root());
    const Footprint held = HeldNow(model->root());
    EXPECT_EQ(Kept(configured), Kept(held))
        << "configured " << configured.ToString() << "\nheld "
        << held.ToString();
    EXPECT_GT(configured.owned_bytes(), 0);
  }
}

// f32 cached weights on the CPU: every BERT layer packs its products'
// weights on its first forward, a second copy of them (about 42 MB for
// all-MiniLM-L6-v2) that the projection must count before it exists.
TEST(ConfiguredFootprintTest, CountsThePackedEncoderLayers) {
  // Packing is process-wide: on again however this test ends.
  struct PackingBackOn {
    ~PackingBackOn() { SetPackedEncoderLayers(true); }
  } packing_back_on;
  for (bool packed : {true, false}) {
    SetPackedEncoderLayers(packed);
    std::unique_ptr<Model> model = Load(WeightPolicyOptions{});
    ASSERT_NE(model, nullptr);
    const Footprint configured =
        ConfiguredFootprint(model->root(), {}, /*concurrent_forwards=*/1);
    ASSERT_TRUE(model->Forward(Inputs()).ok());
    int64_t weights_cached_bytes = 0, derived_bytes = 0;
    model->root().Visit([&](Module& module) {
      for (const auto& [name, weight] : module.weights()) {
        weights_cached_bytes += weight->footprint().cached_compute_bytes();
      }
      derived_bytes += module.DerivedBytes();
    });
    EXPECT_EQ(derived_bytes > 0, packed);
    EXPECT_EQ(configured.cached_compute_bytes(),
              weights_cached_bytes + derived_bytes)
        << "packed " << packed;
  }
}

TEST(ConfiguredFootprintTest, BoundsTheTransientCopiesAForwardHolds) {
  for (bool prefetch : {false, true}) {
    const WeightPolicyOptions options = Casting(
        ElementType::kF8E4M3FN, ComputeCopyPolicy::kTransient, prefetch);
    std::unique_ptr<Model> model = Load(options);
    ASSERT_NE(model, nullptr);
    const int64_t bound = ConfiguredFootprint(model->root(), options, 1)
                              .transient_compute_bytes();
    // Every module's pre- and post-forward hook (after the casting hooks)
    // samples the transient copies alive in the whole model.
    absl::Mutex mu;
    int64_t most_alive_bytes = 0;
    Module& root = model->root();
    auto sample = [&](const Module&, ForwardContext&) {
      const int64_t alive = HeldNow(root).transient_compute_bytes();
      absl::MutexLock lock(&mu);
      most_alive_bytes = std::max(most_alive_bytes, alive);
    };
    root.Visit([&](Module& module) {
      module.AddPreForwardHook(sample);
      module.AddPostForwardHook(sample);
    });
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(model->Forward(Inputs()).ok());
    EXPECT_GT(most_alive_bytes, 0) << "casting made transient copies";
    EXPECT_LE(most_alive_bytes, bound) << "prefetch " << prefetch;
  }
}

// A tied lm_head (qwen2's fixture ties it) multiplies by the embedding
// table; with more rows than the storage product takes (a prefill), that is
// a compute copy of the whole table, held during the head's forward: larger
// here than any layer's weights, so a bound without it is exceeded.
TEST(ConfiguredFootprintTest, CountsATiedHeadsCopyOfTheEmbedding) {
  for (bool prefetch : {false, true}) {
    const WeightPolicyOptions options = Casting(
        ElementType::kF8E4M3FN, ComputeCopyPolicy::kTransient, prefetch);
    absl::StatusOr<std::unique_ptr<Model>> loaded =
        LoadHfModel("models/testdata/qwen2", options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    Module& root = (*loaded)->root();
    const int64_t bound =
        ConfiguredFootprint(root, options, 1).transient_compute_bytes();
    absl::Mutex mu;
    int64_t most_alive_bytes = 0;
    auto sample = [&](const Module&, ForwardContext&) {
      const int64_t alive = HeldNow(root).transient_compute_bytes();
      absl::MutexLock lock(&mu);
      most_alive_bytes = std::max(most_alive_bytes, alive);
    };
    root.Visit([&](Module& module) {
      module.AddPreForwardHook(sample);
      module.AddPostForwardHook(sample);
    });
    // More tokens than a product reading the storage takes.
    const int64_t tokens = StorageProductMaxRows() + 8;
    const NamedTensors prefill = {
        {"input_ids", at::arange(3, 3 + tokens, at::kLong).view({1, tokens})}};
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*loaded)->Forward(prefill).ok());
    // The table's f32 copy: 192 x 32 floats.
    EXPECT_GE(most_alive_bytes, 192 * 32 * 4) << "the head copied the table";
    EXPECT_LE(most_alive_bytes, bound) << "prefetch " << prefetch;
  }
}

TEST(ConfiguredFootprintTest, ScalesTheTransientBoundWithConcurrentForwards) {
  const WeightPolicyOptions options =
      Casting(ElementType::kBF16, ComputeCopyPolicy::kTransient);
  std::unique_ptr<Model> model = Load(options);
  ASSERT_NE(model, nullptr);
  const Footprint one = ConfiguredFootprint(model->root(), options, 1);
  const Footprint four = ConfiguredFootprint(model->root(), options, 4);
  EXPECT_GT(one.transient_compute_bytes(), 0);
  EXPECT_EQ(four.transient_compute_bytes(), 4 * one.transient_compute_bytes());
  EXPECT_EQ(Kept(four), Kept(one)) << "storage is shared by the forwards";

  WeightPolicyOptions pooled = options;
  pooled.reuse_transient_buffers = true;
  std::unique_ptr<Model> pooled_model = Load(pooled);
  ASSERT_NE(pooled_model, nullptr);
  EXPECT_GT(ConfiguredFootprint(pooled_model->root(), pooled, 1)
                .transient_compute_bytes(),
            one.transient_compute_bytes())
      << "idle pooled buffers count too";

  const WeightPolicyOptions cached =
      Casting(ElementType::kBF16, ComputeCopyPolicy::kCached);
  std::unique_ptr<Model> cached_model = Load(cached);
  ASSERT_NE(cached_model, nullptr);
  EXPECT_EQ(ConfiguredFootprint(cached_model->root(), cached, 4)
                .transient_compute_bytes(),
            0);
}

}  // namespace
}  // namespace castserve::models
