#ifndef CASTSERVE_SERVER_VERSION_H_
#define CASTSERVE_SERVER_VERSION_H_

#include <string>

namespace castserve {

// Reported by ServerMetadata, --version and castserve_build_info.
inline constexpr char kServerName[] = "castserve";
inline constexpr char kServerVersion[] = "0.1.0";

// The LibTorch version the daemon was compiled against, e.g. "1.13.0".
std::string LibTorchVersion();

}  // namespace castserve

#endif  // CASTSERVE_SERVER_VERSION_H_
