// The memory a model holds once it serves (its configured footprint), known
// from the checkpoint's headers and the weight policy before any tensor data
// is read: what the ModelManager reserves against --memory-budget-bytes when
// it admits a load (server/lifecycle/model_manager.h).
#ifndef CASTSERVE_MODELS_LOADING_CONFIGURED_FOOTPRINT_H_
#define CASTSERVE_MODELS_LOADING_CONFIGURED_FOOTPRINT_H_

#include "casting/memory/footprint.h"
#include "models/loading/weight_policy.h"
#include "models/module.h"

namespace castserve::models {

// The configured footprint of the module tree `root`, built under `options`
// (lazily: nothing need be materialized), served by `concurrent_forwards`
// forwards at a time (a model's instances, >= 1). Reads no tensor data.
//
// - Mapped, resident and cached compute bytes: the sum of every weight's
//   casting::Weight::ConfiguredFootprint (exact: what the weights hold once
//   every module ran), plus in cached compute what modules derive from
//   their copies and keep (Module::ConfiguredDerivedBytes: a packed encoder
//   layer's packed weights).
// - Transient compute bytes: a bound on the copies alive at once. The casting
//   hooks (casting_hooks.h) acquire a module's own weights before its forward
//   and release them after, so one forward holds the own weights of the
//   modules on its path from the root to the running module: at most the
//   largest root-to-leaf sum of own transient bytes. With prefetch it holds
//   one more module's (the next one's): at most the largest module's.
//   Concurrent forwards may each be at a different module: times
//   `concurrent_forwards`. With a buffer pool (UsesBufferPool) freed copies
//   stay idle between forwards: at most casting::BufferPool::Options' count
//   per (dtype, bytes) shape and its total. Modules that read their own
//   weights (Module::ReadsOwnWeights: an embedding gathering rows) hold no
//   whole copies and are left out: their gathered rows are activations.
//   A module that multiplies by another's weights (Module::BorrowsWeightsOf:
//   a tied lm_head with more rows than the storage product takes) holds
//   their copies on its own path; they count there (not in the prefetch
//   term: a borrowed copy is never prefetched).
//
// owned_bytes() of the result is what the model's weights may hold at most.
casting::Footprint ConfiguredFootprint(const Module& root,
                                       const WeightPolicyOptions& options,
                                       int concurrent_forwards);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_CONFIGURED_FOOTPRINT_H_
