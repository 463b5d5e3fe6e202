#include "casting/weight.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using test_util::HeaderTensor;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// A checkpoint with:
//   "w_bf16"   BF16 [4, 8]  values i/8 - 2 (exact in bf16)
//   "w_f32"    F32  [3, 5]  with a tiny row (1e-6 scale) and a large row
//   "ids"      I64  [6]     0..5
//   "big"      F32  [4096, 4] ones, 64 KiB spanning many pages
// written to `path`, opened with the safetensors reader.
std::shared_ptr<const Checkpoint> WriteCheckpoint(const std::string& path) {
  std::string data;
  std::vector<HeaderTensor> tensors;
  auto append = [&](const std::string& name, const std::string& dtype,
                    std::vector<int64_t> shape, const at::Tensor& values) {
    const uint64_t begin = data.size();
    data.append(static_cast<const char*>(values.data_ptr()), values.nbytes());
    tensors.push_back({name, dtype, std::move(shape), begin, data.size()});
  };
  at::Tensor bf16 = (at::arange(32, at::kFloat) / 8 - 2).to(at::kBFloat16);
  append("w_bf16", "BF16", {4, 8}, bf16);
  at::Tensor f32 = at::randn({3, 5}, at::kFloat);
  f32[0] *= 1e-6;
  f32[2] *= 300;
  append("w_f32", "F32", {3, 5}, f32);
  append("ids", "I64", {6}, at::arange(6, at::kLong));
  append("big", "F32", {4096, 4}, at::ones({4096, 4}, at::kFloat));
  EXPECT_TRUE(test_util::WriteSafetensorsFile(
                  path, test_util::MakeHeaderJson(tensors), data)
                  .ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      OpenSafetensors(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return std::shared_ptr<const Checkpoint>(*std::move(checkpoint));
}

at::Tensor SourceAsFloat(const Checkpoint& checkpoint,
                         const std::string& name) {
  const TensorEntry* entry = checkpoint.Find(name);
  at::ScalarType type =
      entry->dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat;
  at::Tensor tensor = at::empty(entry->shape, type);
  std::memcpy(tensor.data_ptr(), checkpoint.Bytes(*entry).data(),
              entry->size_bytes);
  return tensor.to(at::kFloat);
}

// Resident bytes of this process in the mapping that holds `address`, from
// /proc/self/smaps (the kernel's count for this process, unlike mincore's
// page-cache view).
int64_t MappingRssBytes(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    // Header lines start "begin-end perms ..."; field lines "Name: value".
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      inside = target >= begin && target < end;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4)) * 1024;
    }
  }
  ADD_FAILURE() << "no mapping holds " << address;
  return -1;
}

class WeightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath(
        std::string(
            ::testing::UnitTest::GetInstance()->current_test_info()->name()) +
        ".safetensors");
    checkpoint_ = WriteCheckpoint(path_);
  }

  std::unique_ptr<Weight> MakeWeight(const std::string& name,
                                     WeightOptions options) {
    absl::StatusOr<std::unique_ptr<Weight>> weight =
        Weight::Create(checkpoint_, name, options);
    EXPECT_TRUE(weight.ok()) << weight.status();
    return weight.ok() ? *std::move(weight) : nullptr;
  }

  // "w_f32" stored in bf16, computed in f32 through a cached copy.
  std::unique_ptr<Weight> MakeCachedF32FromBf16Weight() {
    WeightOptions options;
    options.storage = StorageFormat::Plain(ElementType::kBF16);
    options.compute_dtype = ElementType::kF32;
    options.compute_copy = ComputeCopyPolicy::kCached;
    return MakeWeight("w_f32", options);
  }

  // A copy of the weight's compute values, its handle released again
  // (undefined when Acquire fails, which it reports).
  static at::Tensor ComputeValues(Weight& weight) {
    absl::StatusOr<ComputeHandle> handle = weight.Acquire();
    EXPECT_TRUE(handle.ok()) << handle.status();
    return handle.ok() ? handle->tensor().clone() : at::Tensor();
  }

  std::string path_;
  std::shared_ptr<const Checkpoint> checkpoint_;
};

TEST_F(WeightTest, LazyUpcastDecodesBf16ToF32OnFirstUseAndCachesIt) {
  WeightOptions options;
  options.residency = Residency::kMapped;
  options.compute_dtype = ElementType::kF32;
  options.compute_copy = ComputeCopyPolicy::kCached;
  std::unique_ptr<Weight> weight = MakeWeight("w_bf16", options);
  EXPECT_EQ(weight->footprint().mapped_bytes(), 64);
  EXPECT_EQ(weight->compute_builds(), 0);

  {
    absl::StatusOr<ComputeHandle> handle = weight->Acquire();
    ASSERT_TRUE(handle.ok()) << handle.status();
    EXPECT_EQ(handle->tensor().scalar_type(), at::kFloat);
    EXPECT_EQ(handle->tensor().sizes(), (std::vector<int64_t>{4, 8}));
    EXPECT_TRUE(handle->tensor().equal(SourceAsFloat(*checkpoint_, "w_bf16")));
  }
  EXPECT_EQ(weight->footprint().cached_compute_bytes(), 4 * 8 * 4);
  ASSERT_TRUE(weight->Acquire().ok());
  EXPECT_EQ(weight->compute_builds(), 1) << "cached: decoded once";
  const WeightActivity activity = weight->activity();
  EXPECT_EQ(activity.storage_materializations, 0) << "mapped: no storage copy";
  EXPECT_EQ(activity.compute_materializations, 1);
  EXPECT_EQ(activity.compute_bytes, 4 * 8 * 4);
  EXPECT_GT(activity.compute_time, absl::ZeroDuration());
  EXPECT_EQ(activity.transient_compute_bytes, 0) << "cached, not transient";
}

TEST_F(WeightTest, FilePagesAreReleasedOnceOnlyACopyIsRead) {
  const TensorEntry& big = *checkpoint_->Find("big");  // 64 KiB of f32
  const void* mapping = checkpoint_->Bytes(big).data();
  auto touch = [&] {
    std::vector<uint8_t> copy(big.size_bytes);
    ASSERT_TRUE(checkpoint_->CopyTo(big, absl::MakeSpan(copy)).ok());
  };
  const int64_t page = sysconf(_SC_PAGESIZE);

  WeightOptions resident;  // eager-style: an f32 -> bf16 storage copy
  resident.storage = StorageFormat::Plain(ElementType::kBF16);
  touch();
  EXPECT_GE(MappingRssBytes(mapping), static_cast<int64_t>(big.size_bytes));
  ASSERT_TRUE(MakeWeight("big", resident)->Materialize().ok());
  EXPECT_LE(MappingRssBytes(mapping), page) << "resident copy made";

  WeightOptions cached;  // lazy upcast: mapped storage, cached compute copy
  cached.residency = Residency::kMapped;
  cached.compute_dtype = ElementType::kBF16;
  touch();
  std::unique_ptr<Weight> lazy = MakeWeight("big", cached);
  ASSERT_TRUE(lazy->Acquire().ok());
  EXPECT_LE(MappingRssBytes(mapping), page) << "cached copy made";

  // Transient copies decode from the mapping on every forward: its pages
  // stay.
  WeightOptions transient = cached;
  transient.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> cast = MakeWeight("big", transient);
  ASSERT_TRUE(cast->Acquire().ok());
  EXPECT_GE(MappingRssBytes(mapping), static_cast<int64_t>(big.size_bytes));
}

TEST_F(WeightTest, LayerwiseCastingKeepsFp8AndDropsTheTransientCopy) {
  WeightOptions options;
  options.residency = Residency::kResident;
  options.storage = {ElementType::kF8E4M3FN, Scaling::kNone};
  options.compute_dtype = ElementType::kBF16;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_bf16", options);

  ASSERT_TRUE(weight->Materialize().ok());
  Footprint resident = weight->footprint();
  EXPECT_EQ(resident.mapped_bytes(), 0);
  EXPECT_EQ(resident.resident_bytes("f8_e4m3fn"), 32) << resident.ToString();
  {
    absl::StatusOr<ComputeHandle> handle = weight->Acquire();
    ASSERT_TRUE(handle.ok()) << handle.status();
    EXPECT_EQ(handle->tensor().scalar_type(), at::kBFloat16);
    // i/8 - 2 for i < 32 needs at most 4 significant bits except a few
    // values; compare with the fp8 rounding tolerance (2^-4 relative).
    at::Tensor expected = SourceAsFloat(*checkpoint_, "w_bf16");
    EXPECT_TRUE(at::allclose(handle->tensor().to(at::kFloat), expected,
                             /*rtol=*/0.0625, /*atol=*/1e-3));
    EXPECT_EQ(weight->footprint().transient_compute_bytes(), 64);
  }
  EXPECT_EQ(weight->footprint().transient_compute_bytes(), 0)
      << "the last release frees the transient copy";
  ASSERT_TRUE(weight->Acquire().ok());
  EXPECT_EQ(weight->compute_builds(), 2) << "transient: decoded per use";
  const WeightActivity activity = weight->activity();
  EXPECT_EQ(activity.storage_materializations, 1);
  EXPECT_EQ(activity.storage_bytes, 32) << "one fp8 byte per element";
  EXPECT_GT(activity.storage_time, absl::ZeroDuration());
  EXPECT_EQ(activity.compute_materializations, 2);
  EXPECT_EQ(activity.compute_bytes, 2 * 64);
  EXPECT_EQ(activity.transient_compute_bytes, 2 * 64);
}

// One weight policy of each kind: resident plain, bf16 and fp8 (scaled)
// storage, mapped; cached and transient compute copies.
std::vector<WeightOptions> PolicyCases() {
  struct Case {
    Residency residency;
    StorageFormat storage;
    ElementType compute;
    ComputeCopyPolicy copy;
  };
  const Case cases[] = {
      {Residency::kResident, StorageFormat::Plain(ElementType::kF32),
       ElementType::kF32, ComputeCopyPolicy::kCached},
      {Residency::kResident, StorageFormat::Plain(ElementType::kBF16),
       ElementType::kF32, ComputeCopyPolicy::kCached},
      {Residency::kResident,
       {ElementType::kF8E4M3FN, Scaling::kPerRow},
       ElementType::kF32,
       ComputeCopyPolicy::kTransient},
      {Residency::kResident,
       {ElementType::kF8E5M2, Scaling::kPerTensor},
       ElementType::kBF16,
       ComputeCopyPolicy::kCached},
      {Residency::kMapped, StorageFormat::Plain(ElementType::kF32),
       ElementType::kF32, ComputeCopyPolicy::kCached},
      {Residency::kMapped, StorageFormat::Plain(ElementType::kF32),
       ElementType::kBF16, ComputeCopyPolicy::kTransient},
  };
  std::vector<WeightOptions> policies;
  for (const Case& c : cases) {
    WeightOptions options;
    options.residency = c.residency;
    options.storage = c.storage;
    options.compute_dtype = c.compute;
    options.compute_copy = c.copy;
    policies.push_back(options);
  }
  return policies;
}

TEST_F(WeightTest, ConfiguredFootprintIsWhatTheWeightHoldsWhenItServes) {
  for (const char* name : {"w_bf16", "w_f32", "ids", "big"}) {
    for (const WeightOptions& options : PolicyCases()) {
      std::unique_ptr<Weight> weight = MakeWeight(name, options);
      ASSERT_NE(weight, nullptr);
      const Footprint configured = weight->ConfiguredFootprint();
      ASSERT_TRUE(weight->Materialize().ok());
      absl::StatusOr<ComputeHandle> handle = weight->Acquire();
      ASSERT_TRUE(handle.ok()) << handle.status();
      EXPECT_EQ(configured, weight->footprint())
          << name << " " << options.storage.ToString() << ": configured "
          << configured.ToString() << ", held "
          << weight->footprint().ToString();
    }
  }
}

// Every configuration demoted to each tier frees what the tier does not
// keep, and the next use builds bitwise the same compute copy and stored
// elements as before, back to the configured footprint.
TEST_F(WeightTest, DemotionFreesWhatTheTierDropsAndUseRebuildsItBitwise) {
  for (const char* name : {"w_bf16", "w_f32", "ids"}) {
    for (const WeightOptions& options : PolicyCases()) {
      std::unique_ptr<Weight> weight = MakeWeight(name, options);
      ASSERT_NE(weight, nullptr);
      const std::string what =
          absl::StrCat(name, " ", options.storage.ToString());
      const bool floating = std::string(name) != "ids";
      auto compute = [&] {
        absl::StatusOr<ComputeHandle> handle = weight->Acquire();
        EXPECT_TRUE(handle.ok()) << what << ": " << handle.status();
        return handle.ok() ? handle->tensor().clone() : at::Tensor();
      };
      auto stored = [&] {
        absl::StatusOr<const StorageView*> view = weight->ReadStorage();
        EXPECT_TRUE(view.ok()) << what << ": " << view.status();
        if (!view.ok()) return std::string();
        return std::string(reinterpret_cast<const char*>((*view)->data),
                           (*view)->size_bytes());
      };
      const at::Tensor first = compute();
      const std::string first_stored = floating ? stored() : "";
      const Footprint configured = weight->ConfiguredFootprint();
      ASSERT_EQ(weight->footprint().owned_bytes(),
                configured.owned_bytes() - configured.transient_compute_bytes())
          << what << ": " << weight->footprint().ToString();

      ASSERT_TRUE(weight->Demote(WeightTier::kHot).ok());
      EXPECT_EQ(weight->footprint().cached_compute_bytes(),
                configured.cached_compute_bytes())
          << what;
      ASSERT_TRUE(weight->Demote(WeightTier::kWarm).ok());
      EXPECT_EQ(weight->footprint().cached_compute_bytes(), 0) << what;
      EXPECT_EQ(weight->footprint().total_resident_bytes(),
                configured.total_resident_bytes())
          << what;
      EXPECT_TRUE(compute().equal(first)) << what << ": warm";

      ASSERT_TRUE(weight->Demote(WeightTier::kCool).ok());
      const Footprint cool = weight->footprint();
      EXPECT_EQ(cool.owned_bytes(), 0) << what << ": " << cool.ToString();
      EXPECT_EQ(cool.mapped_bytes(),
                static_cast<int64_t>(checkpoint_->Find(name)->size_bytes))
          << what;
      if (floating) {
        // Read in the file's format when that differs from the storage's
        // (F32 stored from BF16): the same values, widened by the product.
        const StorageFormat cool_format = (*weight->ReadStorage())->format;
        if (cool_format == options.storage || !weight->ServesMappedWhenCool()) {
          EXPECT_EQ(stored(), first_stored) << what << ": cool";
        } else {
          EXPECT_EQ(cool_format, StorageFormat::Plain(ElementType::kBF16))
              << what;
          EXPECT_EQ(std::string(name), "w_bf16") << what;
        }
        // Storage that is the file's bytes is read from the mapping.
        EXPECT_EQ((*weight->ReadStorage())->mapped,
                  options.residency == Residency::kMapped ||
                      weight->ServesMappedWhenCool())
            << what;
      }
      EXPECT_TRUE(compute().equal(first)) << what << ": cool";
      ASSERT_TRUE(weight->Promote(WeightTier::kHot).ok()) << what;
      EXPECT_FALSE(weight->serving_mapped()) << what;
      EXPECT_EQ(weight->footprint().owned_bytes(),
                configured.owned_bytes() - configured.transient_compute_bytes())
          << what << ": promoted back by use and Promote";
      if (floating) {
        EXPECT_EQ((*weight->ReadStorage())->mapped,
                  options.residency == Residency::kMapped)
            << what;
        EXPECT_EQ(stored(), first_stored) << what << ": promoted";
      }
    }
  }
}

TEST_F(WeightTest, DemotionWaitsForNoOneToHoldTheComputeCopy) {
  WeightOptions options;
  options.storage = StorageFormat::Plain(ElementType::kBF16);
  options.compute_copy = ComputeCopyPolicy::kCached;
  std::unique_ptr<Weight> weight = MakeWeight("w_f32", options);
  absl::StatusOr<ComputeHandle> handle = weight->Acquire();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Footprint held = weight->footprint();
  absl::Status demoted = weight->Demote(WeightTier::kCool);
  EXPECT_EQ(demoted.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(demoted.message(), HasSubstr("'w_f32': 1 users"));
  EXPECT_EQ(weight->footprint(), held) << "nothing freed";
  handle->Reset();
  EXPECT_TRUE(weight->Demote(WeightTier::kCool).ok());
  EXPECT_EQ(weight->footprint().owned_bytes(), 0);
}

TEST(WeightActivityTest, SumsFieldByField) {
  WeightActivity total;
  WeightActivity one;
  one.storage_materializations = 1;
  one.storage_bytes = 10;
  one.storage_time = absl::Milliseconds(2);
  one.compute_materializations = 3;
  one.compute_bytes = 40;
  one.compute_time = absl::Milliseconds(5);
  one.transient_compute_bytes = 20;
  one.storage_reads = 7;
  total += one;
  total += one;
  EXPECT_EQ(total.storage_materializations, 2);
  EXPECT_EQ(total.storage_bytes, 20);
  EXPECT_EQ(total.storage_time, absl::Milliseconds(4));
  EXPECT_EQ(total.compute_materializations, 6);
  EXPECT_EQ(total.compute_bytes, 80);
  EXPECT_EQ(total.compute_time, absl::Milliseconds(10));
  EXPECT_EQ(total.transient_compute_bytes, 40);
  EXPECT_EQ(total.storage_reads, 14);
}

TEST_F(WeightTest, ConcurrentUsersShareOneDecodedCopy) {
  WeightOptions options;
  options.storage = {ElementType::kF8E5M2, Scaling::kPerRow};
  options.compute_dtype = ElementType::kF32;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_f32", options);

  constexpr int kThreads = 8;
  std::vector<ComputeHandle> handles(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<ComputeHandle> handle = weight->Acquire();
      ASSERT_TRUE(handle.ok());
      handles[i] = *std::move(handle);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(weight->compute_builds(), 1);
  for (const ComputeHandle& handle : handles) {
    EXPECT_TRUE(handle.tensor().is_same(handles[0].tensor()));
  }
  handles.resize(1);
  EXPECT_GT(weight->footprint().transient_compute_bytes(), 0);
  handles.clear();
  EXPECT_EQ(weight->footprint().transient_compute_bytes(), 0);
}

// Promote decodes a cached compute copy outside the weight's lock: users
// that acquire the weight meanwhile get the same values, and the weight
// ends with one cached copy, whichever thread built it.
TEST_F(WeightTest, UsersDuringAPromotionGetTheSameCopyValues) {
  std::unique_ptr<Weight> weight = MakeCachedF32FromBf16Weight();
  const at::Tensor reference = ComputeValues(*weight);
  ASSERT_TRUE(reference.defined());
  const Footprint hot = weight->footprint();
  ASSERT_GT(hot.cached_compute_bytes(), 0);

  constexpr int kRounds = 30;
  constexpr int kUsers = 3;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(
        weight->Demote(round % 2 == 0 ? WeightTier::kWarm : WeightTier::kCool)
            .ok());
    std::atomic<int> mismatches{0};
    std::vector<std::thread> users;
    for (int i = 0; i < kUsers; ++i) {
      users.emplace_back([&] {
        absl::StatusOr<ComputeHandle> handle = weight->Acquire();
        if (!handle.ok() || !handle->tensor().equal(reference)) ++mismatches;
      });
    }
    const absl::Status promoted = weight->Promote(WeightTier::kHot);
    for (std::thread& user : users) user.join();
    ASSERT_TRUE(promoted.ok()) << promoted;
    EXPECT_EQ(mismatches.load(), 0) << "round " << round;
    EXPECT_EQ(weight->footprint(), hot) << "round " << round;
  }
}

// A promotion builds back what the demotion dropped: a cached copy no user
// made (products of few rows read the storage) is not made by it either.
TEST_F(WeightTest, PromotionMakesACachedCopyOnlyWhereADemotionDroppedOne) {
  std::unique_ptr<Weight> weight = MakeCachedF32FromBf16Weight();
  ASSERT_TRUE(weight->ReadStorage().ok());
  const int64_t storage_bytes = weight->footprint().total_resident_bytes();
  ASSERT_GT(storage_bytes, 0);
  ASSERT_EQ(weight->footprint().cached_compute_bytes(), 0);

  ASSERT_TRUE(weight->Demote(WeightTier::kCool).ok());
  ASSERT_TRUE(weight->Promote(WeightTier::kHot).ok());
  EXPECT_EQ(weight->footprint().total_resident_bytes(), storage_bytes);
  EXPECT_EQ(weight->footprint().cached_compute_bytes(), 0)
      << "no user had made the copy";

  // Once a user made it, a demotion drops it and a promotion builds it back.
  const at::Tensor reference = ComputeValues(*weight);
  const int64_t copy_bytes = weight->footprint().cached_compute_bytes();
  ASSERT_GT(copy_bytes, 0);
  for (const WeightTier tier : {WeightTier::kWarm, WeightTier::kCool}) {
    ASSERT_TRUE(weight->Demote(tier).ok());
    EXPECT_EQ(weight->footprint().cached_compute_bytes(), 0);
    ASSERT_TRUE(weight->Promote(WeightTier::kHot).ok());
    EXPECT_EQ(weight->footprint().cached_compute_bytes(), copy_bytes)
        << WeightTierName(tier);
    EXPECT_TRUE(ComputeValues(*weight).equal(reference));
  }
}

TEST_F(WeightTest, PerRowScalingKeepsTinyRowsThatAPlainCastFlushes) {
  WeightOptions scaled;
  scaled.storage = {ElementType::kF8E4M3FN, Scaling::kPerRow};
  WeightOptions plain;
  plain.storage = {ElementType::kF8E4M3FN, Scaling::kNone};
  at::Tensor expected = SourceAsFloat(*checkpoint_, "w_f32");

  // A handle must not outlive its weight.
  std::unique_ptr<Weight> scaled_weight = MakeWeight("w_f32", scaled);
  absl::StatusOr<ComputeHandle> with_scales = scaled_weight->Acquire();
  ASSERT_TRUE(with_scales.ok());
  // Row 0 holds values ~1e-6: far below fp8's smallest subnormal (2^-9).
  EXPECT_TRUE(at::allclose(with_scales->tensor()[0], expected[0], 0.0625, 0));
  std::unique_ptr<Weight> plain_weight = MakeWeight("w_f32", plain);
  absl::StatusOr<ComputeHandle> without = plain_weight->Acquire();
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->tensor()[0].abs().max().item<float>(), 0.0f);
  // Row 2 (~300x) saturates at 448 when plain, not when scaled.
  EXPECT_TRUE(at::allclose(with_scales->tensor()[2], expected[2], 0.0625, 0));
}

TEST_F(WeightTest, SkippedModulesStoreTheComputeDtypeOnce) {
  WeightOptions options;
  options.storage = StorageFormat::Plain(ElementType::kF32);
  options.compute_dtype = ElementType::kF32;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_bf16", options);
  absl::StatusOr<ComputeHandle> first = weight->Acquire();
  ASSERT_TRUE(first.ok());
  first->Reset();
  absl::StatusOr<ComputeHandle> second = weight->Acquire();
  ASSERT_TRUE(second.ok());
  const Footprint footprint = weight->footprint();
  EXPECT_EQ(footprint.resident_bytes("f32"), 4 * 8 * 4) << footprint.ToString();
  EXPECT_EQ(footprint.transient_compute_bytes(), 0) << "no second copy";
  EXPECT_EQ(weight->compute_builds(), 1);
  const WeightActivity activity = weight->activity();
  EXPECT_EQ(activity.storage_materializations, 1);
  EXPECT_EQ(activity.storage_bytes, 4 * 8 * 4);
  EXPECT_EQ(activity.compute_materializations, 0)
      << "the resident copy is the compute copy";
  EXPECT_TRUE(second->tensor().equal(SourceAsFloat(*checkpoint_, "w_bf16")));
}

TEST_F(WeightTest, IntegerTensorsPassThroughUncast) {
  WeightOptions options;
  options.storage = {ElementType::kF8E4M3FN, Scaling::kNone};
  options.compute_dtype = ElementType::kBF16;
  std::unique_ptr<Weight> weight = MakeWeight("ids", options);
  absl::StatusOr<ComputeHandle> handle = weight->Acquire();
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(handle->tensor().scalar_type(), at::kLong);
  EXPECT_TRUE(handle->tensor().equal(at::arange(6, at::kLong)));
}

TEST_F(WeightTest, IntegerTensorsAreRejectedWhereOnlyFloatsMayPass) {
  WeightOptions options;
  options.pass_through_integers = false;
  absl::Status status = Weight::Create(checkpoint_, "ids", options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("weight 'ids' has dtype I64"));
  EXPECT_THAT(status.message(), HasSubstr("F32, F16, BF16"));
  EXPECT_TRUE(Weight::Create(checkpoint_, "w_bf16", options).ok());
}

TEST_F(WeightTest, PrefetchComputeMeansTheNextAcquireDoesNotDecode) {
  WeightOptions options;
  options.storage = {ElementType::kF8E4M3FN, Scaling::kPerTensor};
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_f32", options);
  weight->AdviseWillNeed();
  std::thread prefetch([&] { ASSERT_TRUE(weight->PrefetchCompute().ok()); });
  prefetch.join();
  EXPECT_EQ(weight->compute_builds(), 1);
  ASSERT_TRUE(weight->Acquire().ok());
  EXPECT_EQ(weight->compute_builds(), 1);
}

// The prefetch thread runs outside any forward's exception handler: a
// compute copy that cannot be allocated (1 TiB of f32 from a sparse 512 GiB
// bf16 tensor) must come back as a status, not an exception that would end
// the daemon.
TEST(WeightPrefetchTest, AllocationFailureIsAStatusNotAnException) {
  const std::string path = TempPath("prefetch_oom.safetensors");
  const int64_t numel = int64_t{1} << 38;
  const std::string header = test_util::MakeHeaderJson(
      {{"huge", "BF16", {numel}, 0, static_cast<uint64_t>(numel) * 2}});
  ASSERT_TRUE(test_util::WriteSafetensorsFile(
                  path, header, "",
                  8 + header.size() + static_cast<uint64_t>(numel) * 2)
                  .ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      OpenSafetensors(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  WeightOptions options;
  options.residency = Residency::kMapped;
  absl::StatusOr<std::unique_ptr<Weight>> weight =
      Weight::Create(std::shared_ptr<const Checkpoint>(*std::move(checkpoint)),
                     "huge", options);
  ASSERT_TRUE(weight.ok()) << weight.status();
  absl::Status status;
  EXPECT_NO_THROW(status = (*weight)->PrefetchCompute());
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("prefetch of huge"));
  std::remove(path.c_str());
}

// Tensors larger than the 8 MiB staging chunk are read, encoded and decoded
// chunk by chunk; the result must equal the codec run over the whole tensor.
TEST(WeightChunkedTest, ChunkedEncodeAndDecodeEqualWholeTensorCodec) {
  const std::string path = TempPath("chunked.safetensors");
  at::manual_seed(5);
  // 3001 rows of 1000 bf16 values: 6 MB of bf16, 12 MB as f32, so the
  // f32 source spans two chunks with a partial last one.
  const at::Tensor values =
      (at::randn({3001, 1000}) * at::logspace(-6, 2, 3001).unsqueeze(1));
  const at::Tensor f32 = values.contiguous();
  std::string data(static_cast<const char*>(f32.data_ptr()), f32.nbytes());
  ASSERT_TRUE(test_util::WriteSafetensorsFile(
                  path,
                  test_util::MakeHeaderJson(
                      {{"w", "F32", {3001, 1000}, 0, data.size()}}),
                  data)
                  .ok());
  std::shared_ptr<const Checkpoint> checkpoint = *OpenSafetensors(path);
  for (const StorageFormat format :
       {StorageFormat{ElementType::kF8E4M3FN, Scaling::kPerRow},
        StorageFormat{ElementType::kF8E5M2, Scaling::kNone},
        StorageFormat{ElementType::kBF16, Scaling::kNone}}) {
    WeightOptions options;
    options.storage = format;
    options.compute_dtype = ElementType::kF32;
    std::unique_ptr<Weight> weight = *Weight::Create(checkpoint, "w", options);
    absl::StatusOr<ComputeHandle> handle = weight->Acquire();
    ASSERT_TRUE(handle.ok()) << handle.status();
    // The reference: one Encode and one Decode over the whole tensor.
    std::vector<uint8_t> encoded(f32.numel() * format.element_size_bytes());
    std::vector<float> scales(3001);
    ASSERT_TRUE(Encode(ElementType::kF32, f32.data_ptr(), f32.numel(), 3001,
                       format, encoded.data(), scales.data())
                    .ok());
    at::Tensor expected = at::empty({3001, 1000}, at::kFloat);
    ASSERT_TRUE(Decode(format, encoded.data(), scales.data(), f32.numel(), 3001,
                       ElementType::kF32, expected.data_ptr())
                    .ok());
    EXPECT_TRUE(handle->tensor().equal(expected)) << format.ToString();
  }
  // Mapped f32 -> bf16 decode (3M elements: two chunks of the staging
  // buffer) rounds as LibTorch's cast does (to nearest even).
  WeightOptions mapped;
  mapped.residency = Residency::kMapped;
  mapped.compute_dtype = ElementType::kBF16;
  std::unique_ptr<Weight> weight = *Weight::Create(checkpoint, "w", mapped);
  absl::StatusOr<ComputeHandle> handle = weight->Acquire();
  ASSERT_TRUE(handle.ok());
  EXPECT_TRUE(handle->tensor().equal(f32.to(at::kBFloat16)));
}

TEST_F(WeightTest, GatherRowsChecksIdsAndUsesAnExistingCopy) {
  WeightOptions options;
  options.residency = Residency::kMapped;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_bf16", options);
  const at::Tensor expected = SourceAsFloat(*checkpoint_, "w_bf16");
  absl::StatusOr<at::Tensor> rows =
      weight->GatherRows(at::tensor({2, 0}, at::kLong));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->equal(expected.index_select(0, at::tensor({2, 0}))));
  EXPECT_EQ(weight->GatherRows(at::tensor({4}, at::kLong)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(weight->GatherRows(at::tensor({-1}, at::kLong)).status().code(),
            absl::StatusCode::kOutOfRange);
  // While a user holds the whole copy, rows come from it.
  absl::StatusOr<ComputeHandle> handle = weight->Acquire();
  ASSERT_TRUE(handle.ok());
  const WeightActivity before = weight->activity();
  rows = weight->GatherRows(at::tensor({3}, at::kInt));
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->equal(expected.index_select(0, at::tensor({3}))));
  EXPECT_EQ(weight->activity().compute_materializations,
            before.compute_materializations);
}

TEST_F(WeightTest, GatherRowsFromScaledStorageEqualsTheWholeDecode) {
  for (Scaling scaling : {Scaling::kPerRow, Scaling::kPerTensor}) {
    WeightOptions options;
    options.storage = StorageFormat{ElementType::kF8E4M3FN, scaling};
    options.compute_copy = ComputeCopyPolicy::kTransient;
    std::unique_ptr<Weight> weight = MakeWeight("w_f32", options);
    const at::Tensor whole = ComputeValues(*weight);
    ASSERT_TRUE(whole.defined());
    ASSERT_FALSE(weight->has_compute_copy());
    const at::Tensor ids = at::tensor({2, 0, 2}, at::kLong);
    absl::StatusOr<at::Tensor> rows = weight->GatherRows(ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_TRUE(rows->equal(whole.index_select(0, ids)))
        << options.storage.ToString();
    absl::StatusOr<at::Tensor> none =
        weight->GatherRows(at::empty({0}, at::kLong));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(none->sizes(), (std::vector<int64_t>{0, 5}));
  }
}

TEST_F(WeightTest, TruncatedFileIsAnErrorForThisWeightOnly) {
  WeightOptions options;
  options.residency = Residency::kMapped;
  std::unique_ptr<Weight> big = MakeWeight("big", options);
  // Decoded straight from the mapping (f32 -> bf16), not copied.
  WeightOptions decoded = options;
  decoded.compute_dtype = ElementType::kBF16;
  std::unique_ptr<Weight> big_bf16 = MakeWeight("big", decoded);
  // Encoded straight from the mapping (f32 -> fp8 per row), not copied.
  WeightOptions encoded;
  encoded.residency = Residency::kResident;
  encoded.storage = {ElementType::kF8E4M3FN, Scaling::kPerRow};
  std::unique_ptr<Weight> big_fp8 = MakeWeight("big", encoded);
  std::unique_ptr<Weight> first = MakeWeight("w_bf16", options);
  // Cut the file where the last tensor starts: its later pages vanish (a
  // read there raises SIGBUS), the first page with the others stays.
  const TensorEntry* entry = checkpoint_->Find("big");
  ASSERT_EQ(truncate(path_.c_str(), entry->offset_bytes), 0);
  absl::StatusOr<ComputeHandle> handle = big->Acquire();
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kDataLoss)
      << handle.status();
  absl::StatusOr<ComputeHandle> decoded_handle = big_bf16->Acquire();
  ASSERT_FALSE(decoded_handle.ok());
  EXPECT_EQ(decoded_handle.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded_handle.status().message()),
              HasSubstr("tensor 'big'"));
  absl::StatusOr<ComputeHandle> encoded_handle = big_fp8->Acquire();
  ASSERT_FALSE(encoded_handle.ok());
  EXPECT_EQ(encoded_handle.status().code(), absl::StatusCode::kDataLoss)
      << encoded_handle.status();
  EXPECT_THAT(std::string(encoded_handle.status().message()),
              HasSubstr("tensor 'big'"));
  EXPECT_TRUE(first->Acquire().ok());
}

TEST_F(WeightTest, ReadStorageViewsTheMappingWithoutACopy) {
  WeightOptions options;
  options.residency = Residency::kMapped;
  options.compute_copy = ComputeCopyPolicy::kTransient;
  std::unique_ptr<Weight> weight = MakeWeight("w_bf16", options);
  EXPECT_EQ(weight->storage_format(), StorageFormat::Plain(ElementType::kBF16));
  absl::StatusOr<const StorageView*> read = weight->ReadStorage();
  ASSERT_TRUE(read.ok()) << read.status();
  const StorageView* view = *read;
  EXPECT_TRUE(view->mapped);
  EXPECT_EQ(view->data,
            checkpoint_->Bytes(*checkpoint_->Find("w_bf16")).data());
  EXPECT_EQ(view->format, StorageFormat::Plain(ElementType::kBF16));
  EXPECT_EQ(view->rows, 4);
  EXPECT_EQ(view->cols, 8);
  EXPECT_EQ(view->size_bytes(), 64);
  EXPECT_EQ(view->scales.data, nullptr);
  // Built once: a second read is the same view, counted.
  absl::StatusOr<const StorageView*> again = weight->ReadStorage();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, view);
  const WeightActivity activity = weight->activity();
  EXPECT_EQ(activity.storage_reads, 2);
  EXPECT_EQ(activity.compute_materializations, 0);
  EXPECT_FALSE(weight->has_compute_copy());
}

TEST_F(WeightTest, ReadStorageViewsResidentFp8AndItsScaleGrid) {
  for (Scaling scaling : {Scaling::kPerRow, Scaling::kPerTensor}) {
    WeightOptions options;
    options.storage = {ElementType::kF8E4M3FN, scaling};
    options.compute_copy = ComputeCopyPolicy::kTransient;
    std::unique_ptr<Weight> weight = MakeWeight("w_f32", options);
    absl::StatusOr<const StorageView*> read = weight->ReadStorage();
    ASSERT_TRUE(read.ok()) << read.status();
    const StorageView* view = *read;
    EXPECT_FALSE(view->mapped);
    EXPECT_EQ(view->format, options.storage);
    EXPECT_EQ(view->rows, 3);
    EXPECT_EQ(view->cols, 5);
    ASSERT_NE(view->scales.data, nullptr);
    EXPECT_EQ(view->scales.grid_rows, scaling == Scaling::kPerRow ? 3 : 1);
    EXPECT_EQ(view->scales.grid_cols, 1);
    // Element by element, the view's codes times its grid's scales are the
    // transient compute copy.
    absl::StatusOr<ComputeHandle> handle = weight->Acquire();
    ASSERT_TRUE(handle.ok()) << handle.status();
    const at::Tensor compute = handle->tensor();
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 5; ++c) {
        const float value =
            ElementBitsToF32(ElementType::kF8E4M3FN, view->data[r * 5 + c]) *
            view->scales.At(r, c);
        EXPECT_EQ(value, compute[r][c].item<float>()) << r << "," << c;
      }
    }
    EXPECT_EQ(weight->activity().storage_materializations, 1);
  }
}

TEST_F(WeightTest, ReadStorageRefusesIntegerTensors) {
  std::unique_ptr<Weight> ids = MakeWeight("ids", WeightOptions());
  EXPECT_EQ(ids->storage_format(), std::nullopt);
  EXPECT_EQ(ids->ReadStorage().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(WeightTest, CreateRejectsBadOptionsAndNames) {
  WeightOptions options;
  EXPECT_THAT(Weight::Create(checkpoint_, "absent", options).status().message(),
              HasSubstr("'absent' is not in the checkpoint"));
  options.compute_dtype = ElementType::kF8E5M2;
  EXPECT_THAT(Weight::Create(checkpoint_, "w_f32", options).status().message(),
              HasSubstr("compute dtype F8_E5M2"));
  options.compute_dtype = ElementType::kF32;
  options.storage = {ElementType::kBF16, Scaling::kPerRow};
  EXPECT_EQ(Weight::Create(checkpoint_, "w_f32", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace castserve::casting

namespace castserve::casting {
namespace {

// A pre-quantized [20, 40] fp8 weight with 8x16 block scales (3 x 3, ragged
// last blocks) stored as BF16, as checkpoints store them, plus a per-row
// weight with F32 [20, 1] scales and a scale of the wrong size.
class PrequantizedWeightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(3);
    codes_ = at::randint(0, 0x7E, {20, 40}, at::kByte);  // Finite e4m3 codes.
    block_scales_ = (at::rand({3, 3}) + 0.5).to(at::kBFloat16);
    row_scales_ = at::rand({20, 1}) + 0.25;
    std::string data;
    std::vector<HeaderTensor> tensors;
    auto append = [&](const std::string& name, const std::string& dtype,
                      const at::Tensor& values) {
      const uint64_t begin = data.size();
      data.append(static_cast<const char*>(values.data_ptr()), values.nbytes());
      tensors.push_back(
          {name, dtype, values.sizes().vec(), begin, data.size()});
    };
    append("block.weight", "F8_E4M3", codes_);
    append("block.weight_scale_inv", "BF16", block_scales_);
    append("row.weight", "F8_E4M3", codes_);
    append("row.weight_scale", "F32", row_scales_);
    append("bad.weight_scale", "F32", at::ones({19, 1}));
    const std::string path = TempPath("prequantized.safetensors");
    ASSERT_TRUE(test_util::WriteSafetensorsFile(
                    path, test_util::MakeHeaderJson(tensors), data)
                    .ok());
    auto checkpoint = OpenSafetensors(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = *std::move(checkpoint);
  }

  // The codes decoded one by one through the scalar reference, each times
  // the scale of its block.
  at::Tensor Expected(const at::Tensor& scale_per_element) const {
    at::Tensor values = at::empty({20, 40}, at::kFloat);
    for (int64_t i = 0; i < 800; ++i) {
      values.view({-1})[i] = ElementBitsToF32(ElementType::kF8E4M3FN,
                                              codes_.view({-1})[i].item<int>());
    }
    return values * scale_per_element;
  }

  at::Tensor codes_, block_scales_, row_scales_;
  std::shared_ptr<const Checkpoint> checkpoint_;
};

TEST_F(PrequantizedWeightTest, BlockScalesDecodeFromTheFileBytes) {
  const at::Tensor per_element = block_scales_.to(at::kFloat)
                                     .repeat_interleave(8, 0)
                                     .slice(0, 0, 20)
                                     .repeat_interleave(16, 1)
                                     .slice(1, 0, 40);
  const at::Tensor expected = Expected(per_element);
  for (Residency residency : {Residency::kResident, Residency::kMapped}) {
    WeightOptions options;
    options.residency = residency;
    options.storage = StorageFormat::PerBlock(ElementType::kF8E4M3FN, 8, 16);
    options.scales_entry = "block.weight_scale_inv";
    options.compute_copy = ComputeCopyPolicy::kTransient;
    auto weight = Weight::Create(checkpoint_, "block.weight", options);
    ASSERT_TRUE(weight.ok()) << weight.status();
    auto handle = (*weight)->Acquire();
    ASSERT_TRUE(handle.ok()) << handle.status();
    EXPECT_TRUE(at::equal(handle->tensor(), expected));
    handle->Reset();
    const Footprint footprint = (*weight)->footprint();
    if (residency == Residency::kResident) {
      // The file's 800 fp8 bytes, not re-encoded, and 9 f32 scales.
      EXPECT_EQ(footprint.resident_bytes("f8_e4m3fn:per_block_8x16"),
                800 + 9 * 4);
    } else {
      EXPECT_EQ(footprint.mapped_bytes(), 800);
      EXPECT_EQ(footprint.resident_bytes("f32"), 9 * 4);
    }
    // An embedding's rows come out as in the whole decode.
    const at::Tensor ids = at::tensor({19, 0, 8}, at::kLong);
    auto rows = (*weight)->GatherRows(ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_TRUE(at::equal(*rows, expected.index_select(0, ids)));
    // Cool: the file's pages only, scales dropped too; used again, the
    // same elements from the same bytes.
    ASSERT_TRUE((*weight)->Demote(WeightTier::kCool).ok());
    EXPECT_EQ((*weight)->footprint().owned_bytes(), 0);
    auto again = (*weight)->Acquire();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(at::equal(again->tensor(), expected));
  }
}

TEST_F(PrequantizedWeightTest, PerRowScalesAndBf16Compute) {
  WeightOptions options;
  options.storage = {ElementType::kF8E4M3FN, Scaling::kPerRow};
  options.scales_entry = "row.weight_scale";
  options.compute_dtype = ElementType::kBF16;
  auto weight = Weight::Create(checkpoint_, "row.weight", options);
  ASSERT_TRUE(weight.ok()) << weight.status();
  auto handle = (*weight)->Acquire();
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE(
      at::equal(handle->tensor(), Expected(row_scales_).to(at::kBFloat16)));
  const at::Tensor ids = at::tensor({3, 3, 11}, at::kLong);
  auto rows = (*weight)->GatherRows(ids);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(at::equal(*rows, handle->tensor().index_select(0, ids)));
}

// An embedding lookup in a mapped pre-quantized (or per-block) table reads
// and decodes only the gathered rows: with the file cut inside the table,
// rows before the cut are still gathered, and only a row past it is an
// error (a whole-table decode would fail for every lookup).
TEST(PrequantizedGatherTest, GathersRowsWithoutReadingTheWholeTable) {
  constexpr int64_t kRows = 64, kCols = 4096;  // 4 KiB a row: a page each.
  at::manual_seed(5);
  const at::Tensor codes = at::randint(0, 0x7E, {kRows, kCols}, at::kByte);
  const at::Tensor scales = at::rand({kRows / 8, kCols / 128}) + 0.5;
  std::string data;
  std::vector<HeaderTensor> tensors;
  auto append = [&](const std::string& name, const std::string& dtype,
                    const at::Tensor& values) {
    const uint64_t begin = data.size();
    data.append(static_cast<const char*>(values.data_ptr()), values.nbytes());
    tensors.push_back({name, dtype, values.sizes().vec(), begin, data.size()});
  };
  append("emb.weight_scale_inv", "F32", scales);  // Before the table.
  append("emb.weight", "F8_E4M3", codes);
  const std::string path = TempPath("prequantized_gather.safetensors");
  ASSERT_TRUE(test_util::WriteSafetensorsFile(
                  path, test_util::MakeHeaderJson(tensors), data)
                  .ok());
  auto opened = OpenSafetensors(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const Checkpoint> checkpoint = *std::move(opened);
  WeightOptions options;
  options.residency = Residency::kMapped;
  options.storage = StorageFormat::PerBlock(ElementType::kF8E4M3FN, 8, 128);
  options.scales_entry = "emb.weight_scale_inv";
  options.compute_copy = ComputeCopyPolicy::kTransient;
  auto weight = Weight::Create(checkpoint, "emb.weight", options);
  ASSERT_TRUE(weight.ok()) << weight.status();
  const at::Tensor ids = at::tensor({9, 0, 17, 9}, at::kLong);
  auto before = (*weight)->GatherRows(ids);
  ASSERT_TRUE(before.ok()) << before.status();
  // Cut the file half way through the table.
  const TensorEntry* entry = checkpoint->Find("emb.weight");
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(entry->offset_bytes +
                                                      entry->size_bytes / 2)),
            0);
  auto after = (*weight)->GatherRows(ids);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(at::equal(*after, *before));
  // Each row equals the scalar reference times its block's scale.
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t row = ids[i].item<int64_t>();
    for (int64_t col : {int64_t{0}, int64_t{127}, int64_t{128}, kCols - 1}) {
      const float expected = ElementBitsToF32(ElementType::kF8E4M3FN,
                                              codes[row][col].item<int>()) *
                             scales[row / 8][col / 128].item<float>();
      EXPECT_EQ((*after)[i][col].item<float>(), expected)
          << "row " << row << " col " << col;
    }
  }
  auto past = (*weight)->GatherRows(at::tensor({kRows - 1}, at::kLong));
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kDataLoss) << past.status();
}

TEST_F(PrequantizedWeightTest, CreateRefusesScalesThatDoNotFit) {
  WeightOptions options;
  options.storage = {ElementType::kF8E4M3FN, Scaling::kPerRow};
  options.scales_entry = "bad.weight_scale";
  auto weight = Weight::Create(checkpoint_, "row.weight", options);
  ASSERT_FALSE(weight.ok());
  EXPECT_THAT(weight.status().message(), HasSubstr("'bad.weight_scale'"));
  EXPECT_THAT(weight.status().message(), HasSubstr("needs 20"));
  options.scales_entry = "missing.weight_scale";
  weight = Weight::Create(checkpoint_, "row.weight", options);
  ASSERT_FALSE(weight.ok());
  EXPECT_THAT(weight.status().message(), HasSubstr("are missing"));
  options.scales_entry = "row.weight_scale";
  options.storage = {ElementType::kF8E5M2, Scaling::kPerRow};
  weight = Weight::Create(checkpoint_, "row.weight", options);
  ASSERT_FALSE(weight.ok());
  EXPECT_THAT(weight.status().message(), HasSubstr("F8_E4M3"));
}

}  // namespace
}  // namespace castserve::casting
