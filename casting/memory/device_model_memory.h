// DeviceModelMemory: bytes each model holds on accelerator devices (cuda:N),
// live, peak since registration, and a resettable window peak (one batch).
// LibTorch-free bookkeeping; what feeds it is device_memory.h's CUDA half.
//
// How allocations are attributed (and why not a MemPool per model): the CUDA
// build attaches one AllocatorTraceTracker to LibTorch's caching allocator
// (device_memory_cuda.cc). The allocator calls it synchronously on the
// allocating thread for every ALLOC and FREE_REQUESTED, with the block's
// address and the requested size (the tensor's bytes; the allocator's own
// allocated_bytes statistic counts blocks rounded up to 512 bytes, so a
// model's bytes can be a little below its share of that statistic).
// An ALLOC made while a casting::ScopedModelTag is set on the thread (a
// model's load, its forwards on the instance threads, and its prefetch
// thread, which inherits the tag) counts for that model here; the address
// is remembered, so the free is credited back to the same model from any
// thread. This is exact per block, changes nothing in how memory is
// allocated (models share the allocator's cache), and needs no stream of
// its own per model. A MemPool per model with a stream filter would instead
// give each model a private segment cache (memory reserved per model, not
// shared), needs a distinct forward stream per model for the filter to tell
// models apart, and LibTorch exposes no per-pool peak to read.
// LibTorch's intra-op threads do not inherit the tag (as on the CPU); on
// CUDA they allocate nothing device-side.
//
// Thread safety: every method is safe to call concurrently (one mutex; the
// CUDA tracker calls it under the caching allocator's lock, and nothing here
// calls back into the allocator, so the lock order is fixed).
#ifndef CASTSERVE_CASTING_MEMORY_DEVICE_MODEL_MEMORY_H_
#define CASTSERVE_CASTING_MEMORY_DEVICE_MODEL_MEMORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace castserve::casting {

struct DeviceModelUsage {
  int64_t live_bytes = 0;
  // Highest live_bytes since Register.
  int64_t peak_bytes = 0;
  // Highest live_bytes since the last StartWindow (or Register).
  int64_t window_peak_bytes = 0;
};

class DeviceModelMemory {
 public:
  DeviceModelMemory() = default;
  DeviceModelMemory(const DeviceModelMemory&) = delete;
  DeviceModelMemory& operator=(const DeviceModelMemory&) = delete;

  // The process's ledger, fed by the CUDA tracker. Never destroyed.
  static DeviceModelMemory& Global();

  // Starts counting for `model_id` from zero (again, if it was registered).
  void Register(absl::string_view model_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops counting: later allocations under the id are not attributed;
  // frees of its live blocks are still matched and dropped.
  void Unregister(absl::string_view model_id) ABSL_LOCKS_EXCLUDED(mu_);

  // A block of `bytes` at (`device`, `address`) was allocated under
  // `model_id` (ignored when empty or not registered).
  void OnAllocate(absl::string_view model_id, int device, uint64_t address,
                  int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // The block at (`device`, `address`) was freed (ignored if not attributed).
  void OnFree(int device, uint64_t address) ABSL_LOCKS_EXCLUDED(mu_);

  // Zeros for an unregistered id.
  DeviceModelUsage Usage(absl::string_view model_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Restarts the window peak from the live bytes and returns them (0 for an
  // unregistered id). Concurrent windows of one model share the peak: each
  // then reads an upper bound.
  int64_t StartWindow(absl::string_view model_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Counters {
    DeviceModelUsage usage;
    bool registered = true;
  };
  struct Block {
    std::string model_id;
    int64_t bytes = 0;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, Counters, std::less<>> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, uint64_t>, Block> blocks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_DEVICE_MODEL_MEMORY_H_
