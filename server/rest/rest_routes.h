// The KServe v2 REST paths (and Triton's extensions) castserve serves: one
// table row per path pattern, with its method, its operation and the token
// scope it needs. Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_REST_REST_ROUTES_H_
#define CASTSERVE_SERVER_REST_REST_ROUTES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/core/auth.h"

namespace castserve {

enum class RestOperation {
  kServerLive,           // GET  /v2/health/live
  kServerReady,          // GET  /v2/health/ready
  kServerMetadata,       // GET  /v2
  kModelMetadata,        // GET  /v2/models/{model}[/versions/{version}]
  kModelReady,           // GET  .../ready
  kModelConfig,          // GET  .../config
  kModelInfer,           // POST .../infer
  kModelGenerate,        // POST .../generate (Triton's generate extension)
  kModelGenerateStream,  // POST .../generate_stream (server-sent events)
  kModelStatistics,      // GET  .../stats, or /v2/models/stats for all models
  kRepositoryIndex,      // POST /v2/repository/index
  kRepositoryLoad,       // POST /v2/repository/models/{model}/load
  kRepositoryUnload,     // POST /v2/repository/models/{model}/unload
};

struct RestRoute {
  RestOperation operation;
  // From the path; empty where the path names none.
  std::string model;
  std::string version;
  // The scope a token needs; none for the health paths.
  std::optional<Scope> scope;
};

// What a request's method and path come to: a route, or the HTTP refusal
// (404 for a path castserve does not serve, 405 with the allowed method).
struct RouteMatch {
  std::optional<RestRoute> route;
  int status_code = 404;
  // For 405: the value of the Allow header.
  std::string allow;
};

// HEAD is accepted wherever GET is. The path is without its query string;
// "/v2/models/stats" means every model's statistics (as in Triton), so a
// model named "stats" has no metadata path.
RouteMatch MatchRestRoute(absl::string_view method, absl::string_view path);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_ROUTES_H_
