// PrefetchCounts: how a model's prefetches turned out. Its own header so that
// code reporting the counts (models/model.h, the server's metrics) needs
// neither the casting hooks nor LibTorch.
#ifndef CASTSERVE_MODELS_PREFETCH_COUNTS_H_
#define CASTSERVE_MODELS_PREFETCH_COUNTS_H_

#include <cstdint>

namespace castserve::models {

// How the prefetches of a model's forwards turned out, counted per module
// whose weights were prefetched (cumulative).
struct PrefetchCounts {
  // The module's compute copies were ready when its forward began.
  int64_t hits = 0;
  // The forward reached the module first: its prefetch was still queued
  // (dropped; the module decoded its own weights) or still running (the
  // forward waited for it).
  int64_t misses = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_PREFETCH_COUNTS_H_
