// CastingHooks: the layerwise-casting policy attached to a module tree as
// forward hooks (docs/ARCHITECTURE.md, "One request, end to end").
//
// For every module with weights of its own:
//   pre-forward:  acquire the compute copies of the module's own weights and
//                 hold them in the ForwardContext;
//   post-forward: release them. With transient compute copies this frees
//                 them, so only the running module holds compute copies.
// With prefetch, the pre-hook of module i also hints the weights of the
// next module that has compute copies to build (madvise WILLNEED at once,
// then decoding the compute copies on a background thread), so at most two
// modules' compute copies are live at a time. Modules with nothing to build
// (a norm read in place, cached copies) are passed over, so a large layer
// after a norm is decoded during the layer before the norm. Until every module
// has run once, "next" follows the tree's order (modules are added in the order
// their forward calls them, so the first forward, which for a lazily loaded
// model does all the decoding, is prefetched too); from then on it follows the
// order in which the modules first ran. A module whose compute copies all exist
// (cached copies after their first use) is not prefetched, nor one that reads
// its own weights (Module::ReadsOwnWeights: an embedding gathering rows).
//
// Compute from storage: a weight whose product reads its storage at the
// forward's rows (Module::ComputesFromStorage, asked with the rows the
// ForwardContext noted: a decode step's few rows) gets no compute copy: the
// pre-hook does not acquire it (unless a copy exists, made by a prefetch
// before the rows were known: then it is held and released as usual), and
// prefetch neither decodes it nor stops at a module that has nothing else to
// build. Decode steps then build no compute copies at all.
//
// On CUDA (Options::device) the prefetch runs on its own stream
// (casting/device/side_stream.h): the decodes and host-to-device copies of
// module i+1 are enqueued there while module i computes on the forward's
// stream; the pre-hook of module i+1 makes the forward's stream wait for the
// side stream's event (no host wait once the prefetch was enqueued), and
// Weight::Acquire records the compute copies on the forward's stream so the
// caching allocator does not hand their memory out early. On the CPU the
// prefetch thread decodes directly.
//
// Destroying the object (or Remove) detaches every hook and drops the
// compute copies prefetched for a forward that never used them. The model
// keeps computing without the hooks: Module::Param acquires on demand.
//
// Thread safety: forwards may run concurrently through the hooks. Attach and
// Remove must not race with a forward. The tree must outlive this object.
#ifndef CASTSERVE_MODELS_CASTING_HOOKS_H_
#define CASTSERVE_MODELS_CASTING_HOOKS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "casting/device/device.h"
#include "casting/device/side_stream.h"
#include "models/module.h"
#include "models/prefetch_counts.h"
#include "platform/executor.h"

namespace castserve::models {

class CastingHooks {
 public:
  struct Options {
    bool prefetch = false;
    // The model's device: where prefetched copies are made.
    casting::Device device;
  };

  // Attaches the hooks to `root` and every descendant that has weights.
  static std::unique_ptr<CastingHooks> Attach(Module& root, Options options);
  ~CastingHooks();
  CastingHooks(const CastingHooks&) = delete;
  CastingHooks& operator=(const CastingHooks&) = delete;

  // Detaches the hooks, stops the prefetch thread, drops unused prefetched
  // copies. Idempotent.
  void Remove();

  // Modules with weights in the order prefetch assumes: the tree's until
  // every module ran once, then the order they first ran in.
  std::vector<const Module*> execution_order() const;
  // Prefetches started so far (each one module's weights).
  int64_t prefetches_started() const;
  PrefetchCounts prefetch_counts() const;

 private:
  explicit CastingHooks(Options options);

  void PreForward(const Module& module, ForwardContext& context);
  void PostForward(const Module& module, ForwardContext& context);

  // Records `module` in the learned order; returns the first module after
  // it not to pass over, if the order knows one. Sets `*order_learned` when
  // this call completed the learned order.
  const Module* LearnOrderAndGetNext(const Module& module,
                                     const ForwardContext& context,
                                     bool* order_learned);
  // Sets `order` and `position` to `modules`.
  static void SetOrder(std::vector<const Module*> modules,
                       std::vector<const Module*>& order,
                       std::unordered_map<const Module*, size_t>& position);
  // True for a module with nothing for a prefetch to build: it reads its own
  // weights, or each weight's compute copy exists without a prefetch having
  // made it (a norm read in place, cached copies) or is not needed (read
  // from storage at `context`'s rows).
  bool PassOver(const Module& module, const ForwardContext& context) const;
  // Hints and queues the prefetch of those of `module`'s weights that
  // `context`'s rows do not read from storage.
  void SchedulePrefetch(const Module& module, const ForwardContext& context);
  // Called before `module` acquires: it no longer wants a prefetch, and
  // waits for one in flight.
  void ClaimPrefetch(const Module& module);
  void PrefetchLoop();
  void DropUnclaimedPrefetches();
  // Once the order is learned, every module has run: prefetches still
  // unclaimed were made from the tree's order for modules that already ran
  // (when it differs from the real one). Drops them and the queued ones,
  // so that their transient copies do not live until the next forward.
  void DropStalePrefetches();

  const Options options_;
  std::vector<std::pair<Module*, int>> attached_;  // Module, hook id.

  mutable absl::Mutex order_mu_;
  // The order prefetch follows.
  std::vector<const Module*> order_ ABSL_GUARDED_BY(order_mu_);
  std::unordered_map<const Module*, size_t> position_
      ABSL_GUARDED_BY(order_mu_);
  // The order in which modules first ran, while some have not.
  std::vector<const Module*> learned_ ABSL_GUARDED_BY(order_mu_);
  std::unordered_map<const Module*, size_t> learned_position_
      ABSL_GUARDED_BY(order_mu_);
  bool order_learned_ ABSL_GUARDED_BY(order_mu_) = false;

  // A prefetch to run, and the model id the forward that asked for it
  // attributes its allocations to (casting::ScopedModelTag).
  struct PendingPrefetch {
    const Module* module;
    std::vector<casting::Weight*> weights;  // Those to build.
    std::string model_id;
  };

  // Taken after order_mu_ when both are held (PassOver under
  // LearnOrderAndGetNext), never the other way round.
  mutable absl::Mutex prefetch_mu_;
  std::deque<PendingPrefetch> pending_ ABSL_GUARDED_BY(prefetch_mu_);
  const Module* in_flight_ ABSL_GUARDED_BY(prefetch_mu_) = nullptr;
  // Prefetched, not yet acquired by a forward.
  std::unordered_set<const Module*> unclaimed_ ABSL_GUARDED_BY(prefetch_mu_);
  bool stopping_ ABSL_GUARDED_BY(prefetch_mu_) = false;
  int64_t prefetches_started_ ABSL_GUARDED_BY(prefetch_mu_) = 0;
  PrefetchCounts prefetch_counts_ ABSL_GUARDED_BY(prefetch_mu_);
  // With prefetch: the stream prefetches are enqueued on.
  std::unique_ptr<casting::SideStream> side_stream_;
  std::unique_ptr<platform::Thread> prefetch_thread_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_CASTING_HOOKS_H_
