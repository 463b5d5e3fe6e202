// The OpenAI API's errors: {"error": {"message", "type", "param", "code"}}
// with the HTTP status the KServe path gives the same status
// (server/core/status_conversion.h). A request field that is wrong carries
// its name as the error's `param` (InvalidField, openai_requests.h).
// Stateless; thread-safe.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_ERRORS_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_ERRORS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace castserve::openai {

// The error body of `status` (not OK) and its HTTP status; UNAUTHENTICATED
// also says WWW-Authenticate: Bearer.
HttpResponse ErrorResponse(const absl::Status& status);
// For refusals that have no Status (404 and 405 of the routes).
HttpResponse ErrorResponse(int status_code, absl::string_view message);

// The JSON text of the error object alone, for a streamed answer's event.
std::string ErrorJson(const absl::Status& status);

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_ERRORS_H_
