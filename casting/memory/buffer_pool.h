// BufferPool: reuses the memory of transient compute copies.
//
// A transient copy is allocated when its module runs and freed right after,
// every forward. Fresh large allocations are new pages that the kernel must
// fault in and zero (about 20 ms per 56 MB here, as much as decoding them),
// so a copy freed into the pool is handed to the next copy of the same
// dtype and element count instead. Layers of one model repeat their shapes,
// so a model's pool (one per WeightFactory) serves every layer with a
// couple of buffers per shape.
//
// Memory: the pool keeps at most `max_idle_per_shape` idle buffers per
// (dtype, element count) and `max_idle_bytes` in all (by default two
// buffers per shape, 1 GiB), so between forwards a model holds one or two
// compute copies per distinct weight shape beyond its storage; the peak of a
// forward grows by less than that, since a buffer of each shape was live
// during it anyway. Idle buffers are live allocations (the tracking allocator
// counts them for the model that made them) until the pool is destroyed.
//
// Thread safety: all methods are safe to call concurrently.
#ifndef CASTSERVE_CASTING_MEMORY_BUFFER_POOL_H_
#define CASTSERVE_CASTING_MEMORY_BUFFER_POOL_H_

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace castserve::casting {

class BufferPool {
 public:
  struct Options {
    // Two serve one forward at a time with prefetch: consecutive modules of
    // one shape (a transformer's up and down projections) each hold a copy
    // while the first runs and the second is prefetched.
    int max_idle_per_shape = 2;
    int64_t max_idle_bytes = int64_t{1} << 30;
  };

  BufferPool() : BufferPool(Options{}) {}
  explicit BufferPool(Options options) : options_(options) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A contiguous CPU tensor of `dtype` and `shape`, uninitialized: an idle
  // buffer of that dtype and element count if the pool has one, else a new
  // allocation.
  at::Tensor Take(at::ScalarType dtype, at::IntArrayRef shape)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Returns `tensor`'s memory to the pool. Kept only when nothing else
  // references it (no other tensor or view of its storage) and the limits
  // allow; otherwise it is simply freed.
  void Give(at::Tensor tensor) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t idle_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Takes served from an idle buffer so far.
  int64_t reuses() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::pair<at::ScalarType, int64_t>;  // dtype, element count.

  const Options options_;
  mutable absl::Mutex mu_;
  // Storages, not tensors: a tensor made from one has no view history
  // that would keep another reference to the memory.
  std::map<Key, std::vector<c10::Storage>> idle_ ABSL_GUARDED_BY(mu_);
  int64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reuses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_BUFFER_POOL_H_
