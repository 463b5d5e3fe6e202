#ifndef CASTSERVE_SERVER_VERSION_H_
#define CASTSERVE_SERVER_VERSION_H_

namespace castserve {

// Reported by ServerMetadata, --version and castserve_build_info.
inline constexpr char kServerName[] = "castserve";
inline constexpr char kServerVersion[] = "0.1.0";

}  // namespace castserve

#endif  // CASTSERVE_SERVER_VERSION_H_
