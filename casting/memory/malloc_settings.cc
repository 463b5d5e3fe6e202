#include "casting/memory/malloc_settings.h"

#include <malloc.h>

namespace castserve::casting {

void UseServingMallocSettings() {
  constexpr int kMmapThresholdBytes = 32 << 20;
  constexpr int kTrimThresholdBytes = 8 << 20;
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
}

}  // namespace castserve::casting
