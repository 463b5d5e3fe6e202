#include "server/openai/openai_errors.h"

#include <nlohmann/json.hpp>

#include "server/core/status_conversion.h"
#include "server/openai/openai_requests.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

// OpenAI's error types by HTTP status.
const char* ErrorType(int status_code) {
  switch (status_code) {
    case 400:
    case 404:
    case 405:
    case 413:
    case 415:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
    case 504:
      return "service_unavailable_error";
    default:
      return "server_error";
  }
}

json ErrorObject(int status_code, absl::string_view message,
                 const std::optional<std::string>& param, const char* code) {
  json error = {{"message", std::string(message)},
                {"type", ErrorType(status_code)},
                {"param", nullptr},
                {"code", nullptr}};
  if (param.has_value()) error["param"] = *param;
  if (code != nullptr) error["code"] = code;
  return json{{"error", std::move(error)}};
}

const char* CodeOf(const absl::Status& status) {
  if (absl::IsNotFound(status)) return "model_not_found";
  if (absl::IsUnauthenticated(status)) return "invalid_api_key";
  return nullptr;
}

HttpResponse JsonResponse(int status_code, const json& body) {
  return {status_code,
          "application/json",
          body.dump(-1, ' ', false, json::error_handler_t::replace),
          {}};
}

}  // namespace

HttpResponse ErrorResponse(const absl::Status& status) {
  const int status_code = ToHttpStatusCode(status.code());
  HttpResponse response =
      JsonResponse(status_code, ErrorObject(status_code, status.message(),
                                            FieldOf(status), CodeOf(status)));
  if (absl::IsUnauthenticated(status)) {
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return response;
}

HttpResponse ErrorResponse(int status_code, absl::string_view message) {
  return JsonResponse(status_code,
                      ErrorObject(status_code, message, std::nullopt, nullptr));
}

std::string ErrorJson(const absl::Status& status) {
  return ErrorObject(ToHttpStatusCode(status.code()), status.message(),
                     FieldOf(status), CodeOf(status))
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace castserve::openai
