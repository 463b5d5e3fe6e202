#include "server/libtorch_version.h"

#include <torch/version.h>

namespace castserve {

std::string LibTorchVersion() { return TORCH_VERSION; }

}  // namespace castserve
