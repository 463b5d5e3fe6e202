#include "server/http/path_prefix_router.h"

#include "absl/strings/match.h"

namespace castserve {

HttpService* PathPrefixRouter::ServiceOf(absl::string_view path) const {
  for (const Route& route : routes_) {
    for (const std::string& prefix : route.prefixes) {
      if (!absl::StartsWith(path, prefix)) continue;
      if (path.size() == prefix.size() || path[prefix.size()] == '/') {
        return route.service;
      }
    }
  }
  return fallback_;
}

}  // namespace castserve
