#include "casting/memory/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

// Made by a static initializer, before any test installs the tracking
// allocator: it carries c10's default deleter.
at::Tensor* const early_tensor = new at::Tensor(at::ones({1024}));

TrackingAllocator& Tracker() {
  absl::StatusOr<TrackingAllocator*> tracker =
      TrackingAllocator::InstallTrackingCpuAllocator();
  EXPECT_TRUE(tracker.ok()) << tracker.status();
  return **tracker;
}

at::Tensor Bytes(int64_t n) { return at::empty({n}, at::kByte); }

TEST(TrackingAllocatorTest, InstallIsIdempotent) {
  TrackingAllocator* first = &Tracker();
  TrackingAllocator* second = &Tracker();
  EXPECT_EQ(first, second);
  EXPECT_EQ(TrackingAllocator::Installed(), first);
  EXPECT_EQ(first->DeviceName(), "cpu");
}

TEST(TrackingAllocatorTest, TensorsFromBeforeInstallationFreeCorrectly) {
  TrackingAllocator& tracker = Tracker();
  const int64_t live_bytes = tracker.AllocatedBytes();
  const int64_t live_allocations = tracker.LiveAllocations();
  EXPECT_EQ(early_tensor->sum().item<float>(), 1024.0f);
  early_tensor->reset();  // Freed by c10's own deleter, not counted.
  EXPECT_EQ(tracker.AllocatedBytes(), live_bytes);
  EXPECT_EQ(tracker.LiveAllocations(), live_allocations);
}

TEST(TrackingAllocatorTest, CountsTensorWorkAndReturnsToBaseline) {
  TrackingAllocator& tracker = Tracker();
  torch::NoGradGuard no_grad;
  auto work = [] {
    at::Tensor a = at::randn({256, 256});
    at::Tensor b = at::mm(a, a).to(at::kDouble);
    torch::nn::Linear linear(128, 64);
    at::Tensor y = linear->forward(at::randn({8, 128}));
    return std::make_pair(a, y);
  };
  work();  // Warm up lazily initialized state.
  const int64_t baseline = tracker.AllocatedBytes();
  {
    auto [a, y] = work();
    EXPECT_GE(tracker.AllocatedBytes(), baseline + 256 * 256 * 4 + 8 * 64 * 4);
    const int64_t before_copy = tracker.AllocatedBytes();
    at::Tensor copy = a.to(at::kDouble);
    EXPECT_EQ(tracker.AllocatedBytes(), before_copy + 256 * 256 * 8);
  }
  EXPECT_EQ(tracker.AllocatedBytes(), baseline);
}

TEST(TrackingAllocatorTest, RawInterfaceWorks) {
  TrackingAllocator& tracker = Tracker();
  const int64_t baseline = tracker.AllocatedBytes();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* data = allocator->raw_allocate(1000);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u);
  EXPECT_EQ(tracker.AllocatedBytes(), baseline + 1000);
  allocator->raw_deallocate(data);
  EXPECT_EQ(tracker.AllocatedBytes(), baseline);
}

TEST(TrackingAllocatorTest, PeakScopeMeasuresAKnownAllocation) {
  TrackingAllocator& tracker = Tracker();
  const int64_t baseline = tracker.AllocatedBytes();
  PeakScope scope;
  EXPECT_TRUE(scope.exact());
  EXPECT_EQ(scope.start_bytes(), baseline);
  { at::Tensor big = at::empty({16 * kMiB}, at::kFloat); }
  EXPECT_EQ(tracker.AllocatedBytes(), baseline);
  EXPECT_GE(scope.peak_increase_bytes(), 64 * kMiB);
  EXPECT_GE(tracker.PeakAllocatedBytes(), baseline + 64 * kMiB);
}

TEST(TrackingAllocatorTest, NestedPeakScopesSeeTheirOwnWindow) {
  Tracker();
  PeakScope outer;
  at::Tensor held = Bytes(32 * kMiB);
  {
    PeakScope inner;
    { at::Tensor big = Bytes(64 * kMiB); }
    EXPECT_GE(inner.peak_increase_bytes(), 64 * kMiB);
    EXPECT_LT(inner.peak_increase_bytes(), 96 * kMiB);
    inner.Stop();
    { at::Tensor bigger = Bytes(128 * kMiB); }
    EXPECT_LT(inner.peak_increase_bytes(), 96 * kMiB);  // Frozen by Stop.
  }
  EXPECT_GE(outer.peak_increase_bytes(), (32 + 128) * kMiB);
}

TEST(TrackingAllocatorTest, ResetPeakRestartsFromLiveBytes) {
  TrackingAllocator& tracker = Tracker();
  { at::Tensor big = Bytes(16 * kMiB); }
  tracker.ResetPeak();
  EXPECT_EQ(tracker.PeakAllocatedBytes(), tracker.AllocatedBytes());
  DeviceMemoryStats& stats = tracker;
  { at::Tensor t = Bytes(kMiB); }
  EXPECT_GE(stats.PeakAllocatedBytes(), stats.AllocatedBytes() + kMiB);
}

TEST(TrackingAllocatorTest, AttributesAllocationsPerModelAcrossThreads) {
  TrackingAllocator& tracker = Tracker();
  ASSERT_TRUE(tracker.RegisterModel("bert").ok());
  ASSERT_TRUE(tracker.RegisterModel("llama").ok());
  at::Tensor bert_tensor, llama_tensor;
  std::thread bert([&] {
    ScopedModelTag tag("bert");
    EXPECT_TRUE(tag.attributed());
    bert_tensor = Bytes(10 * kMiB);
  });
  std::thread llama([&] {
    ScopedModelTag tag("llama");
    llama_tensor = Bytes(20 * kMiB);
  });
  bert.join();
  llama.join();
  at::Tensor untagged = Bytes(kMiB);
  EXPECT_EQ(tracker.GetModelUsage("bert")->live_bytes, 10 * kMiB);
  EXPECT_EQ(tracker.GetModelUsage("llama")->live_bytes, 20 * kMiB);

  // Freed here, with no tag: still credited back to each model.
  bert_tensor.reset();
  llama_tensor.reset();
  EXPECT_EQ(tracker.GetModelUsage("bert")->live_bytes, 0);
  EXPECT_EQ(tracker.GetModelUsage("llama")->live_bytes, 0);
  EXPECT_EQ(tracker.GetModelUsage("bert")->peak_bytes, 10 * kMiB);
  EXPECT_EQ(tracker.GetModelUsage("llama")->peak_bytes, 20 * kMiB);
  ASSERT_TRUE(tracker.ResetModelPeak("bert").ok());
  EXPECT_EQ(tracker.GetModelUsage("bert")->peak_bytes, 0);
  EXPECT_TRUE(tracker.UnregisterModel("bert").ok());
  EXPECT_TRUE(tracker.UnregisterModel("llama").ok());
}

TEST(TrackingAllocatorTest, FreeOnAnotherTaggedThreadCreditsTheAllocator) {
  TrackingAllocator& tracker = Tracker();
  ASSERT_TRUE(tracker.RegisterModel("a").ok());
  ASSERT_TRUE(tracker.RegisterModel("b").ok());
  at::Tensor tensor;
  {
    ScopedModelTag tag("a");
    tensor = Bytes(3 * kMiB);
  }
  std::thread([&] {
    ScopedModelTag tag("b");
    tensor.reset();
  }).join();
  EXPECT_EQ(tracker.GetModelUsage("a")->live_bytes, 0);
  EXPECT_EQ(tracker.GetModelUsage("a")->peak_bytes, 3 * kMiB);
  EXPECT_EQ(tracker.GetModelUsage("b")->live_bytes, 0);
  EXPECT_EQ(tracker.GetModelUsage("b")->peak_bytes, 0);
  EXPECT_TRUE(tracker.UnregisterModel("a").ok());
  EXPECT_TRUE(tracker.UnregisterModel("b").ok());
}

TEST(TrackingAllocatorTest, NestedTagsRestoreTheOuterModel) {
  TrackingAllocator& tracker = Tracker();
  ASSERT_TRUE(tracker.RegisterModel("outer").ok());
  ASSERT_TRUE(tracker.RegisterModel("inner").ok());
  at::Tensor in_outer, in_inner, in_unknown, after;
  {
    ScopedModelTag outer("outer");
    {
      ScopedModelTag inner("inner");
      in_inner = Bytes(2 * kMiB);
      ScopedModelTag unknown("never-registered");
      EXPECT_FALSE(unknown.attributed());
      in_unknown = Bytes(5 * kMiB);
    }
    after = Bytes(kMiB);
  }
  EXPECT_EQ(tracker.GetModelUsage("outer")->live_bytes, kMiB);
  EXPECT_EQ(tracker.GetModelUsage("inner")->live_bytes, 2 * kMiB);
  EXPECT_TRUE(tracker.UnregisterModel("outer").ok());
  EXPECT_TRUE(tracker.UnregisterModel("inner").ok());
}

TEST(TrackingAllocatorTest, FreesAfterUnregisterAreSafe) {
  TrackingAllocator& tracker = Tracker();
  ASSERT_TRUE(tracker.RegisterModel("gone").ok());
  at::Tensor tensor;
  {
    ScopedModelTag tag("gone");
    tensor = Bytes(kMiB);
  }
  ASSERT_TRUE(tracker.UnregisterModel("gone").ok());
  EXPECT_EQ(tracker.GetModelUsage("gone").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(tracker.RegisterModel("gone").ok());
  tensor.reset();  // Credited to the old, unregistered counters.
  EXPECT_EQ(tracker.GetModelUsage("gone")->live_bytes, 0);
  EXPECT_TRUE(tracker.UnregisterModel("gone").ok());
}

TEST(TrackingAllocatorTest, ModelRegistrationErrors) {
  TrackingAllocator& tracker = Tracker();
  EXPECT_EQ(tracker.RegisterModel("").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tracker.RegisterModel("m").ok());
  EXPECT_EQ(tracker.RegisterModel("m").code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(tracker.UnregisterModel("m").ok());
  EXPECT_EQ(tracker.UnregisterModel("m").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tracker.ResetModelPeak("m").code(), absl::StatusCode::kNotFound);
}

TEST(TrackingAllocatorTest, ConcurrentAllocationsBalance) {
  TrackingAllocator& tracker = Tracker();
  const int64_t baseline = tracker.AllocatedBytes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) {
        at::Tensor x = Bytes(1 + i % 4096);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(tracker.AllocatedBytes(), baseline);
}

}  // namespace
}  // namespace castserve::casting
