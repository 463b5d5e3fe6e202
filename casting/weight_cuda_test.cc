// Weight on cuda:0: every storage residency gives the CPU's compute copy bit
// for bit, from device or pinned host storage, transient copies are freed
// after use. Skips without a CUDA device.
#include <ATen/ATen.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/device/device_probe.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "casting/weight.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

std::shared_ptr<const Checkpoint> WriteCheckpoint() {
  const std::string path = absl::StrCat(::testing::TempDir(), "/weight_cuda_",
                                        getpid(), ".safetensors");
  std::string data;
  std::vector<test_util::HeaderTensor> tensors;
  const at::Tensor f32 = at::randn({64, 48}, at::kFloat) * 10;
  data.append(static_cast<const char*>(f32.data_ptr()), f32.nbytes());
  tensors.push_back({"w", "F32", {64, 48}, 0, data.size()});
  const uint64_t begin = data.size();
  const at::Tensor ids = at::arange(6, at::kLong);
  data.append(static_cast<const char*>(ids.data_ptr()), ids.nbytes());
  tensors.push_back({"ids", "I64", {6}, begin, data.size()});
  EXPECT_TRUE(test_util::WriteSafetensorsFile(
                  path, test_util::MakeHeaderJson(tensors), data)
                  .ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      OpenSafetensors(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return std::shared_ptr<const Checkpoint>(*std::move(checkpoint));
}

at::Tensor ComputeCopy(Weight& weight) {
  absl::StatusOr<ComputeHandle> handle = weight.Acquire();
  EXPECT_TRUE(handle.ok()) << handle.status();
  return handle.ok() ? handle->tensor().cpu() : at::Tensor();
}

std::vector<WeightOptions> AllOptions() {
  std::vector<WeightOptions> all;
  const std::vector<StorageFormat> formats = {
      StorageFormat::Plain(ElementType::kF32),
      StorageFormat::Plain(ElementType::kBF16),
      StorageFormat::Plain(ElementType::kF8E5M2),
      {ElementType::kF8E4M3FN, Scaling::kPerRow},
      {ElementType::kF8E4M3FN, Scaling::kPerTensor}};
  for (Residency residency : {Residency::kMapped, Residency::kResident}) {
    for (const StorageFormat& format : formats) {
      for (ElementType compute : {ElementType::kF32, ElementType::kBF16}) {
        for (bool on_host : {false, true}) {
          WeightOptions options;
          options.residency = residency;
          options.storage = format;
          options.compute_dtype = compute;
          options.compute_copy = ComputeCopyPolicy::kTransient;
          options.storage_on_host = on_host;
          all.push_back(options);
        }
      }
    }
  }
  return all;
}

TEST(WeightCudaTest, ComputeCopiesEqualTheCpuOnesBitForBit) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::shared_ptr<const Checkpoint> checkpoint = WriteCheckpoint();
  for (WeightOptions options : AllOptions()) {
    const std::string label = absl::StrCat(
        options.storage.ToString(), " host=", options.storage_on_host,
        " mapped=", options.residency == Residency::kMapped);
    std::unique_ptr<Weight> cpu = *Weight::Create(checkpoint, "w", options);
    options.device = Device::Cuda(0);
    std::unique_ptr<Weight> cuda = *Weight::Create(checkpoint, "w", options);
    const at::Tensor expected = ComputeCopy(*cpu);
    const at::Tensor decoded = ComputeCopy(*cuda);
    EXPECT_TRUE(decoded.view(at::kByte).equal(expected.view(at::kByte)))
        << label;
    EXPECT_FALSE(cuda->has_compute_copy()) << label << ": transient";
    const at::Tensor ids = at::tensor({5, 0, 63}, at::kLong).cuda();
    absl::StatusOr<at::Tensor> rows = cuda->GatherRows(ids);
    ASSERT_TRUE(rows.ok()) << label << ": " << rows.status();
    EXPECT_TRUE(rows->is_cuda());
    EXPECT_TRUE(rows->cpu().equal(expected.index_select(0, ids.cpu())))
        << label;
  }
}

// The memory tiers on the device: warm drops the cached copy, cool the
// device (or pinned host) storage, leaving the mapped file; each tier's
// compute copy is the hot one bit for bit, and a promotion builds the
// storage back where the policy keeps it.
TEST(WeightCudaTest, EveryTierGivesTheSameComputeCopyAndCoolFreesTheDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::shared_ptr<const Checkpoint> checkpoint = WriteCheckpoint();
  for (WeightOptions options : AllOptions()) {
    if (options.residency != Residency::kResident) continue;
    options.compute_copy = ComputeCopyPolicy::kCached;
    options.device = Device::Cuda(0);
    const std::string label = absl::StrCat(options.storage.ToString(),
                                           " host=", options.storage_on_host);
    std::unique_ptr<Weight> weight = *Weight::Create(checkpoint, "w", options);
    const at::Tensor hot = ComputeCopy(*weight);
    const int64_t hot_owned = weight->footprint().owned_bytes();
    ASSERT_GT(hot_owned, 0) << label;

    ASSERT_TRUE(weight->Demote(WeightTier::kWarm).ok()) << label;
    EXPECT_EQ(weight->footprint().cached_compute_bytes(), 0) << label;
    EXPECT_TRUE(ComputeCopy(*weight).view(at::kByte).equal(hot.view(at::kByte)))
        << label << ": warm";

    ASSERT_TRUE(weight->Demote(WeightTier::kCool).ok()) << label;
    EXPECT_EQ(weight->footprint().owned_bytes(), 0)
        << label << ": " << weight->footprint().ToString();
    EXPECT_EQ(weight->footprint().mapped_bytes(),
              static_cast<int64_t>(checkpoint->Find("w")->size_bytes))
        << label;
    EXPECT_TRUE(ComputeCopy(*weight).view(at::kByte).equal(hot.view(at::kByte)))
        << label << ": cool";

    ASSERT_TRUE(weight->Demote(WeightTier::kCool).ok()) << label;
    ASSERT_TRUE(weight->Promote(WeightTier::kWarm).ok()) << label;
    EXPECT_GT(weight->footprint().owned_bytes(), 0) << label << ": promoted";
    EXPECT_TRUE(ComputeCopy(*weight).view(at::kByte).equal(hot.view(at::kByte)))
        << label << ": promoted";
  }
}

TEST(WeightCudaTest, IntegersPassThroughToTheDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  WeightOptions options;
  options.device = Device::Cuda(0);
  options.storage_on_host = true;
  std::unique_ptr<Weight> ids =
      *Weight::Create(WriteCheckpoint(), "ids", options);
  absl::StatusOr<ComputeHandle> handle = ids->Acquire();
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE(handle->tensor().is_cuda());
  EXPECT_TRUE(handle->tensor().cpu().equal(at::arange(6, at::kLong)));
}

}  // namespace
}  // namespace castserve::casting
