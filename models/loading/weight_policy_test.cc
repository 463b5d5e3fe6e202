#include "models/loading/weight_policy.h"

#include <gtest/gtest.h>

namespace castserve::models {
namespace {

using casting::ComputeCopyPolicy;
using casting::ElementType;
using casting::Residency;
using casting::StorageFormat;

WeightPolicyOptions Fp8PerRowBf16(Residency residency) {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = ElementType::kF8E4M3FN;
  policy.compute_dtype = ElementType::kBF16;
  policy.scaling = casting::Scaling::kPerRow;
  WeightPolicyOptions options;
  options.residency = residency;
  options.compute_dtype = ElementType::kF32;  // The casting policy's wins.
  options.casting = *casting::CastingPolicy::Create(policy);
  return options;
}

TEST(WeightPolicyTest, WithoutCastingEveryWeightIsPlainInTheComputeDtype) {
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  options.compute_dtype = ElementType::kBF16;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  options.codec.max_threads = 3;
  for (const char* kind : {"Linear", "LayerNorm", "Embedding"}) {
    const casting::WeightOptions weight =
        WeightOptionsFor(options, "encoder.dense", kind);
    EXPECT_EQ(weight.residency, Residency::kMapped) << kind;
    EXPECT_EQ(weight.storage, StorageFormat::Plain(ElementType::kBF16));
    EXPECT_EQ(weight.compute_dtype, ElementType::kBF16);
    EXPECT_EQ(weight.compute_copy, ComputeCopyPolicy::kTransient);
    EXPECT_EQ(weight.codec.max_threads, 3);
    EXPECT_EQ(weight.buffer_pool, nullptr);  // The factory's to set.
  }
  EXPECT_EQ(EffectiveComputeDtype(options), ElementType::kBF16);
}

TEST(WeightPolicyTest, CastWeightsAreResidentInTheStorageFormat) {
  const WeightPolicyOptions options = Fp8PerRowBf16(Residency::kMapped);
  EXPECT_EQ(EffectiveComputeDtype(options), ElementType::kBF16);

  const casting::WeightOptions linear =
      WeightOptionsFor(options, "encoder.dense", "Linear");
  EXPECT_EQ(linear.residency, Residency::kResident);
  EXPECT_EQ(linear.storage,
            (StorageFormat{ElementType::kF8E4M3FN, casting::Scaling::kPerRow}));
  EXPECT_EQ(linear.compute_dtype, ElementType::kBF16);

  // Kept weights follow `residency`, plain in the policy's compute dtype.
  const casting::WeightOptions norm =
      WeightOptionsFor(options, "encoder.LayerNorm", "LayerNorm");
  EXPECT_EQ(norm.residency, Residency::kMapped);
  EXPECT_EQ(norm.storage, StorageFormat::Plain(ElementType::kBF16));
  EXPECT_EQ(norm.compute_dtype, ElementType::kBF16);
}

TEST(WeightPolicyTest, BufferPoolOnlyForReusedTransientCopies) {
  WeightPolicyOptions options;
  options.reuse_transient_buffers = true;
  EXPECT_FALSE(UsesBufferPool(options));  // Cached copies are never freed.
  options.compute_copy = ComputeCopyPolicy::kTransient;
  EXPECT_TRUE(UsesBufferPool(options));
  options.reuse_transient_buffers = false;
  EXPECT_FALSE(UsesBufferPool(options));
}

TEST(WeightPolicyTest, EveryWeightGetsTheModelsDevice) {
  WeightPolicyOptions options = Fp8PerRowBf16(Residency::kMapped);
  options.device = casting::Device::Cuda(1);
  options.storage_on_host = true;
  for (const char* kind : {"Linear", "LayerNorm"}) {
    const casting::WeightOptions weight =
        WeightOptionsFor(options, "encoder.layer.0", kind);
    EXPECT_EQ(weight.device, casting::Device::Cuda(1)) << kind;
    EXPECT_TRUE(weight.storage_on_host) << kind;
  }
  EXPECT_EQ(WeightOptionsFor(WeightPolicyOptions(), "x", "Linear").device,
            casting::Device::Cpu());
}

TEST(WeightPolicyTest, NoBufferPoolOnCudaWhoseAllocatorCaches) {
  WeightPolicyOptions options;
  options.reuse_transient_buffers = true;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  options.device = casting::Device::Cuda(0);
  EXPECT_FALSE(UsesBufferPool(options));
}

TEST(WeightPolicyTest, HooksForTransientCopiesOrPrefetch) {
  WeightPolicyOptions options;
  EXPECT_FALSE(NeedsCastingHooks(options));
  options.prefetch = true;
  EXPECT_TRUE(NeedsCastingHooks(options));
  options.prefetch = false;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  EXPECT_TRUE(NeedsCastingHooks(options));
  // Casting alone (cached copies, no prefetch) needs no hooks.
  EXPECT_FALSE(NeedsCastingHooks(Fp8PerRowBf16(Residency::kResident)));
}

}  // namespace
}  // namespace castserve::models
