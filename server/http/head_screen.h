// The refusals an HTTP API makes from a request's head, before its body is
// read: a path it does not serve, a method the path does not take, a body
// encoding it does not accept. Shared by the REST (KServe v2) and OpenAI
// services, each answering in its own error shape.
#ifndef CASTSERVE_SERVER_HTTP_HEAD_SCREEN_H_
#define CASTSERVE_SERVER_HTTP_HEAD_SCREEN_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace castserve {

// How an API's router matched a request's method and path.
struct PathMatchOutcome {
  bool matched = false;
  // When not matched: 404 (no such path) or 405 (the path exists, not with
  // this method).
  int status_code = 404;
  // For 405: the methods the path takes, the Allow header's value.
  std::string allow;
};

// Makes an API's error response from an HTTP status and a message.
using ErrorResponseMaker =
    std::function<HttpResponse(int status_code, absl::string_view message)>;

// The response refusing `head`, or nullopt when nothing in it is refused:
// 404 "no <api> path <path>" or 405 naming the method and the allowed ones
// (with the Allow header) when `match` did not match; 415 for a
// Content-Encoding other than identity. The body comes from `error`.
std::optional<HttpResponse> RefuseHead(const HttpRequest& head,
                                       const PathMatchOutcome& match,
                                       absl::string_view api,
                                       const ErrorResponseMaker& error);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_HTTP_HEAD_SCREEN_H_
