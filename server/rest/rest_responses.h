// The REST answers every path shares: JSON bodies, and errors as
// {"error": "<message>"} with the HTTP status of the core's status
// (status_conversion.h). Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_REST_REST_RESPONSES_H_
#define CASTSERVE_SERVER_REST_REST_RESPONSES_H_

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace castserve {

inline constexpr char kJsonContentType[] = "application/json";

// Invalid UTF-8 in strings becomes U+FFFD.
HttpResponse RestJsonResponse(int status_code, const nlohmann::json& body);
HttpResponse RestErrorResponse(int status_code, absl::string_view message);
// UNAUTHENTICATED also says WWW-Authenticate: Bearer.
HttpResponse RestErrorResponse(const absl::Status& status);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_RESPONSES_H_
