// device_probe.h for the build without CUDA: nothing to ask.
#include "casting/device/device_probe.h"

namespace castserve::casting {

bool BuiltWithCuda() { return false; }

int CudaDeviceCount() { return 0; }

}  // namespace castserve::casting
