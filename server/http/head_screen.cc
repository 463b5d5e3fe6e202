#include "server/http/head_screen.h"

#include "absl/strings/str_cat.h"

namespace castserve {

std::optional<HttpResponse> RefuseHead(const HttpRequest& head,
                                       const PathMatchOutcome& match,
                                       absl::string_view api,
                                       const ErrorResponseMaker& error) {
  if (!match.matched) {
    if (match.status_code != 405) {
      return error(match.status_code,
                   absl::StrCat("no ", api, " path ", head.path));
    }
    HttpResponse refusal =
        error(405, absl::StrCat(head.method, " is not allowed on ", head.path,
                                " (", match.allow, ")"));
    refusal.headers.emplace_back("Allow", match.allow);
    return refusal;
  }
  const std::string encoding = head.header("content-encoding");
  if (!encoding.empty() && encoding != "identity") {
    return error(
        415, absl::StrCat("Content-Encoding '", encoding, "' is not accepted"));
  }
  return std::nullopt;
}

}  // namespace castserve
