#include "casting/memory/malloc_settings.h"

#include <malloc.h>
#include <stdlib.h>

namespace castserve::casting {

void UseServingMallocSettings() {
  constexpr int kMmapThresholdBytes = 32 << 20;
  constexpr int kTrimThresholdBytes = 8 << 20;
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
  // Read by LibTorch at its first large allocation; an operator's own value
  // (0 turns it off) wins.
  setenv("THP_MEM_ALLOC_ENABLE", "1", /*overwrite=*/0);
}

}  // namespace castserve::casting
