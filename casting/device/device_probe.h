// What this process can place a model on: whether castserve was built with
// CUDA (`bazel build --config=cuda`) and how many CUDA devices the runtime
// sees. The default build links no CUDA library: there the count is 0
// without asking anything (device_probe_none.cc); the CUDA build asks the
// CUDA runtime (device_probe_cuda.cc). //casting/device:device_probe selects
// one with //casting:cuda.
//
// Thread-safe.
#ifndef CASTSERVE_CASTING_DEVICE_DEVICE_PROBE_H_
#define CASTSERVE_CASTING_DEVICE_DEVICE_PROBE_H_

#include "absl/status/status.h"
#include "casting/device/device.h"

namespace castserve::casting {

// True in a build with --config=cuda.
bool BuiltWithCuda();

// Visible CUDA devices: 0 without CUDA support, driver or device.
int CudaDeviceCount();

// OK when tensors can be placed on `device` in this process: always for the
// CPU; for cuda:N when N < CudaDeviceCount(). Otherwise Unavailable with a
// reason that contains "no CUDA device" (and, in a build without CUDA, how
// to build with it).
absl::Status CheckDeviceAvailable(const Device& device);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_DEVICE_DEVICE_PROBE_H_
