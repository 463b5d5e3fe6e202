// device_probe.h for the CUDA build. CudaDeviceCount() is codec_cuda.cu's
// (declared in codec_cuda.h too): it asks the CUDA runtime.
#include "casting/codec/codec_cuda.h"
#include "casting/device/device_probe.h"

namespace castserve::casting {

bool BuiltWithCuda() { return true; }

}  // namespace castserve::casting
