#include "server/rest/rest_routes.h"

#include <vector>

#include "absl/strings/str_split.h"

namespace castserve {
namespace {

struct RouteRow {
  const char* method;
  // Segments separated by '/'; "{model}" and "{version}" capture one.
  const char* pattern;
  RestOperation operation;
  std::optional<Scope> scope;
  // `pattern` split at '/', once, when the table is made.
  std::vector<absl::string_view> segments = {};
};

constexpr char kModel[] = "{model}";
constexpr char kVersion[] = "{version}";

// The first row whose pattern and method match wins: /v2/models/stats comes
// before /v2/models/{model}.
const std::vector<RouteRow>& RouteTable() {
  static const auto* const rows = [] {
    auto* table = new std::vector<RouteRow>{
        {"GET", "v2/health/live", RestOperation::kServerLive, std::nullopt},
        {"GET", "v2/health/ready", RestOperation::kServerReady, std::nullopt},
        {"GET", "v2", RestOperation::kServerMetadata, Scope::kInfer},
        {"GET", "v2/models/stats", RestOperation::kModelStatistics,
         Scope::kInfer},
        {"GET", "v2/models/{model}", RestOperation::kModelMetadata,
         Scope::kInfer},
        {"GET", "v2/models/{model}/versions/{version}",
         RestOperation::kModelMetadata, Scope::kInfer},
        {"GET", "v2/models/{model}/ready", RestOperation::kModelReady,
         Scope::kInfer},
        {"GET", "v2/models/{model}/versions/{version}/ready",
         RestOperation::kModelReady, Scope::kInfer},
        {"GET", "v2/models/{model}/config", RestOperation::kModelConfig,
         Scope::kInfer},
        {"GET", "v2/models/{model}/versions/{version}/config",
         RestOperation::kModelConfig, Scope::kInfer},
        {"POST", "v2/models/{model}/infer", RestOperation::kModelInfer,
         Scope::kInfer},
        {"POST", "v2/models/{model}/versions/{version}/infer",
         RestOperation::kModelInfer, Scope::kInfer},
        {"POST", "v2/models/{model}/generate", RestOperation::kModelGenerate,
         Scope::kInfer},
        {"POST", "v2/models/{model}/versions/{version}/generate",
         RestOperation::kModelGenerate, Scope::kInfer},
        {"POST", "v2/models/{model}/generate_stream",
         RestOperation::kModelGenerateStream, Scope::kInfer},
        {"POST", "v2/models/{model}/versions/{version}/generate_stream",
         RestOperation::kModelGenerateStream, Scope::kInfer},
        {"GET", "v2/models/{model}/stats", RestOperation::kModelStatistics,
         Scope::kInfer},
        {"GET", "v2/models/{model}/versions/{version}/stats",
         RestOperation::kModelStatistics, Scope::kInfer},
        {"POST", "v2/repository/index", RestOperation::kRepositoryIndex,
         Scope::kAdmin},
        {"POST", "v2/repository/models/{model}/load",
         RestOperation::kRepositoryLoad, Scope::kAdmin},
        {"POST", "v2/repository/models/{model}/unload",
         RestOperation::kRepositoryUnload, Scope::kAdmin},
    };
    for (RouteRow& row : *table)
      row.segments = absl::StrSplit(row.pattern, '/');
    return table;
  }();
  return *rows;
}

// The route of `row` when `segments` match its pattern.
std::optional<RestRoute> Match(const RouteRow& row,
                               const std::vector<absl::string_view>& segments) {
  const std::vector<absl::string_view>& pattern = row.segments;
  if (pattern.size() != segments.size()) return std::nullopt;
  RestRoute route{row.operation, "", "", row.scope};
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == kModel) {
      route.model = std::string(segments[i]);
    } else if (pattern[i] == kVersion) {
      route.version = std::string(segments[i]);
    } else if (pattern[i] != segments[i]) {
      return std::nullopt;
    }
  }
  return route;
}

}  // namespace

RouteMatch MatchRestRoute(absl::string_view method, absl::string_view path) {
  RouteMatch match;
  if (path.empty() || path[0] != '/') return match;
  const std::vector<absl::string_view> segments =
      absl::StrSplit(path.substr(1), '/');
  const absl::string_view effective = method == "HEAD" ? "GET" : method;
  for (const RouteRow& row : RouteTable()) {
    std::optional<RestRoute> route = Match(row, segments);
    if (!route.has_value()) continue;
    if (effective == row.method) {
      match.route = std::move(route);
      return match;
    }
    match.status_code = 405;
    match.allow = row.method == absl::string_view("GET") ? "GET, HEAD" : "POST";
  }
  return match;
}

}  // namespace castserve
