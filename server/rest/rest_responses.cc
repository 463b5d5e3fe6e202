#include "server/rest/rest_responses.h"

#include <string>

#include "server/core/status_conversion.h"

namespace castserve {

using nlohmann::json;

HttpResponse RestJsonResponse(int status_code, const json& body) {
  return {status_code,
          kJsonContentType,
          body.dump(-1, ' ', false, json::error_handler_t::replace),
          {}};
}

HttpResponse RestErrorResponse(int status_code, absl::string_view message) {
  return RestJsonResponse(status_code, {{"error", std::string(message)}});
}

HttpResponse RestErrorResponse(const absl::Status& status) {
  HttpResponse response =
      RestErrorResponse(ToHttpStatusCode(status.code()), status.message());
  if (absl::IsUnauthenticated(status)) {
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return response;
}

}  // namespace castserve
