// The LibTorch version the daemon was compiled against. Apart from
// version.h so that the gRPC service, which reports kServerVersion, does not
// depend on LibTorch.
#ifndef CASTSERVE_SERVER_LIBTORCH_VERSION_H_
#define CASTSERVE_SERVER_LIBTORCH_VERSION_H_

#include <string>

namespace castserve {

// E.g. "2.11.0". Reported by --version and castserve_build_info.
std::string LibTorchVersion();

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIBTORCH_VERSION_H_
