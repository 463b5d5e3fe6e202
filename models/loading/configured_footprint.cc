#include "models/loading/configured_footprint.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "casting/memory/buffer_pool.h"
#include "casting/weight.h"

namespace castserve::models {
namespace {

// A buffer pool's key for a transient copy: its dtype and size.
using CopyShape = std::pair<casting::ElementType, int64_t>;

// The transient bytes one subtree's forward can hold.
struct TransientBound {
  // The largest sum of own transient bytes along a root-to-leaf path.
  int64_t path_bytes = 0;
  // The largest own transient bytes of one module.
  int64_t module_bytes = 0;
};

// What a weight holds besides its transient copy.
casting::Footprint WithoutTransient(const casting::Footprint& footprint) {
  casting::Footprint kept;
  kept.AddMapped(footprint.mapped_bytes());
  for (const auto& [format, bytes] : footprint.resident_bytes_by_format()) {
    kept.AddResident(format, bytes);
  }
  kept.AddCachedCompute(footprint.cached_compute_bytes());
  return kept;
}

// Adds the subtree's held bytes to `held` and its transient copies' shapes to
// `shapes`; returns its transient bound.
TransientBound Walk(const Module& module, casting::Footprint* held,
                    std::map<CopyShape, int64_t>* shapes) {
  int64_t own_transient_bytes = 0;
  for (const auto& [local_name, weight] : module.weights()) {
    const casting::Footprint configured = weight->ConfiguredFootprint();
    *held += WithoutTransient(configured);
    const int64_t transient_bytes = configured.transient_compute_bytes();
    if (transient_bytes == 0 || module.ReadsOwnWeights()) continue;
    own_transient_bytes += transient_bytes;
    (*shapes)[{weight->options().compute_dtype, transient_bytes}] =
        transient_bytes;
  }
  held->AddCachedCompute(module.ConfiguredDerivedBytes());
  // A borrowed table's copy (a tied lm_head's embedding, with more rows
  // than the storage product takes) is held on this module's path; it is
  // never prefetched, so it stays out of the prefetch term (module_bytes).
  int64_t borrowed_transient_bytes = 0;
  if (const Module* lender = module.BorrowsWeightsOf()) {
    for (const auto& [local_name, weight] : lender->weights()) {
      const int64_t transient_bytes =
          weight->ConfiguredFootprint().transient_compute_bytes();
      if (transient_bytes == 0) continue;
      borrowed_transient_bytes += transient_bytes;
      (*shapes)[{weight->options().compute_dtype, transient_bytes}] =
          transient_bytes;
    }
  }
  TransientBound bound{own_transient_bytes + borrowed_transient_bytes,
                       own_transient_bytes};
  int64_t deepest_child_bytes = 0;
  for (const Module* child : module.children()) {
    const TransientBound child_bound = Walk(*child, held, shapes);
    deepest_child_bytes = std::max(deepest_child_bytes, child_bound.path_bytes);
    bound.module_bytes = std::max(bound.module_bytes, child_bound.module_bytes);
  }
  bound.path_bytes += deepest_child_bytes;
  return bound;
}

// The most a model's buffer pool keeps idle for copies of `shapes`.
int64_t IdlePoolBytes(const std::map<CopyShape, int64_t>& shapes) {
  const casting::BufferPool::Options pool;
  int64_t idle_bytes = 0;
  for (const auto& [shape, bytes] : shapes) {
    idle_bytes += pool.max_idle_per_shape * bytes;
    if (idle_bytes >= pool.max_idle_bytes) return pool.max_idle_bytes;
  }
  return idle_bytes;
}

}  // namespace

casting::Footprint ConfiguredFootprint(const Module& root,
                                       const WeightPolicyOptions& options,
                                       int concurrent_forwards) {
  casting::Footprint footprint;
  std::map<CopyShape, int64_t> shapes;
  const TransientBound bound = Walk(root, &footprint, &shapes);
  const int64_t per_forward_bytes =
      bound.path_bytes + (options.prefetch ? bound.module_bytes : 0);
  int64_t transient_bytes =
      std::max(concurrent_forwards, 1) * per_forward_bytes;
  if (UsesBufferPool(options)) transient_bytes += IdlePoolBytes(shapes);
  footprint.AddTransientCompute(transient_bytes);
  return footprint;
}

}  // namespace castserve::models
