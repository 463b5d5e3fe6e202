#ifndef CASTSERVE_CASTING_MEMORY_TRACKING_ALLOCATOR_H_
#define CASTSERVE_CASTING_MEMORY_TRACKING_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "casting/memory/memory_stats.h"

namespace castserve::casting {

namespace internal {
struct ModelCounters;
}  // namespace internal

// Bytes held by the allocations attributed to one model.
struct ModelMemoryUsage {
  int64_t live_bytes = 0;
  // Highest live_bytes since registration or the last ResetModelPeak.
  int64_t peak_bytes = 0;
};

// The process-wide tracking CPU allocator: a c10::Allocator, installed with
// c10::SetCPUAllocator, that counts the bytes of live CPU tensor allocations,
// their peak, per-scope peaks (PeakScope) and per-model usage
// (ScopedModelTag). This header does not include LibTorch.
//
// Counting: bytes are the sizes LibTorch asked for. Each allocation also
// carries a small header (c10::gAlignment-rounded, 64 bytes on servers) in
// front of the data, which is not counted. Allocations made before
// installation keep their own deleter and are never counted.
//
// Attribution: an allocation made while a ScopedModelTag is set on the
// allocating thread counts for that model; the model is recorded in the
// allocation's header, so the free is credited back to the same model on any
// thread, with or without a tag. LibTorch's intra-op worker threads do not
// inherit the tag: their (rare) temporary allocations count only globally.
//
// Thread safety: every method is safe to call concurrently. Allocation and
// free are lock-free (atomics only); model registration and lookup by id take
// a mutex. The object is never destroyed (tensors may outlive main).
class TrackingAllocator final : public DeviceMemoryStats {
 public:
  // Installs the tracking allocator as LibTorch's CPU allocator (priority 1,
  // above the default) on the first call; later calls return the same object.
  // Safe from static initializers. FailedPrecondition if another allocator
  // registered with a higher priority holds the CPU slot.
  static absl::StatusOr<TrackingAllocator*> InstallTrackingCpuAllocator();
  // The installed allocator, or nullptr before installation.
  static TrackingAllocator* Installed();

  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  // DeviceMemoryStats.
  int64_t AllocatedBytes() const override;
  int64_t PeakAllocatedBytes() const override;
  void ResetPeak() override;
  std::string DeviceName() const override { return "cpu"; }

  // Number of live allocations made through this allocator.
  int64_t LiveAllocations() const;

  // AlreadyExists if `model_id` is registered; InvalidArgument if empty.
  absl::Status RegisterModel(absl::string_view model_id);
  // NotFound if not registered. Allocations still live keep being credited to
  // the unregistered model's counters, which die with its last allocation;
  // registering the id again starts from zero.
  absl::Status UnregisterModel(absl::string_view model_id);
  absl::StatusOr<ModelMemoryUsage> GetModelUsage(
      absl::string_view model_id) const;
  // Restarts the model's peak from its live bytes. NotFound if unknown.
  absl::Status ResetModelPeak(absl::string_view model_id);

 private:
  friend class PeakScope;
  friend class ScopedModelTag;
  class Adapter;  // The c10::Allocator, defined in the .cc.

  // Concurrent PeakScopes that are measured exactly.
  static constexpr int kMaxScopes = 64;

  TrackingAllocator();
  ~TrackingAllocator() override = default;  // Never destroyed.

  Adapter* const adapter_;  // Never freed: LibTorch keeps pointers to it.

  void OnAllocate(int64_t bytes, internal::ModelCounters* model);
  void OnFree(int64_t bytes, internal::ModelCounters* model);
  // A new reference to the registered model's counters, or nullptr.
  internal::ModelCounters* AcquireModel(absl::string_view model_id) const;
  // Returns a scope slot whose peak starts at the live bytes, or -1 if all
  // are taken.
  int ClaimScopeSlot();
  void ReleaseScopeSlot(int slot);
  int64_t ScopePeakBytes(int slot) const;

  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> live_allocations_{0};
  // Bit i set: scope slot i is in use and allocations raise its peak.
  std::atomic<uint64_t> active_scopes_{0};
  std::atomic<int64_t> scope_peak_bytes_[kMaxScopes] = {};

  mutable absl::Mutex mu_;
  // Each value holds one reference to its counters.
  std::map<std::string, internal::ModelCounters*, std::less<>> models_
      ABSL_GUARDED_BY(mu_);
};

// Measures the highest CPU live bytes reached while it lives (or until Stop).
// Scopes nest and may run concurrently on different threads; each one sees
// the process-wide live bytes (use ScopedModelTag and GetModelUsage for one
// model's share).
//
// Semantics: the peak is the highest live-byte total observed at any
// allocation between construction and Stop, and at least the total at
// construction. Allocations racing with construction may or may not count.
// Up to 64 scopes are exact at a time; further ones report the process-wide
// peak (exact() == false), which is an upper bound unless someone calls
// ResetPeak meanwhile. If the tracking allocator is not installed every value
// is 0 and exact() is false.
//
// Thread safety: one scope object is used by one thread at a time.
class PeakScope {
 public:
  PeakScope();
  ~PeakScope();
  PeakScope(const PeakScope&) = delete;
  PeakScope& operator=(const PeakScope&) = delete;

  // Freezes the values and frees the slot. Idempotent.
  void Stop();

  int64_t start_bytes() const { return start_bytes_; }
  int64_t peak_bytes() const;
  // peak_bytes() - start_bytes(): the extra memory the scope's work needed.
  int64_t peak_increase_bytes() const { return peak_bytes() - start_bytes_; }
  bool exact() const { return exact_; }

 private:
  TrackingAllocator* const allocator_;
  int slot_ = -1;  // -1: no slot (not installed, all taken, or stopped).
  bool exact_ = false;
  bool stopped_ = false;
  int64_t start_bytes_ = 0;
  int64_t stopped_peak_bytes_ = 0;
};

// Attributes the CPU allocations of the current thread to a model while it
// lives; nests (the innermost tag wins, the outer one comes back on
// destruction). If the allocator is not installed or the id is not
// registered, nothing is attributed and attributed() is false.
//
// Construction looks the id up under a mutex: set it once per forward, not
// per allocation. Must be destroyed on the thread that created it.
class ScopedModelTag {
 public:
  explicit ScopedModelTag(absl::string_view model_id);
  ~ScopedModelTag();
  ScopedModelTag(const ScopedModelTag&) = delete;
  ScopedModelTag& operator=(const ScopedModelTag&) = delete;

  bool attributed() const { return model_ != nullptr; }

  // The id the current thread's allocations are attributed to ("" if none):
  // what work handed to another thread passes on, so that the other thread
  // can tag itself the same way.
  static std::string CurrentModelId();

 private:
  internal::ModelCounters* model_;
  internal::ModelCounters* previous_;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_TRACKING_ALLOCATOR_H_
