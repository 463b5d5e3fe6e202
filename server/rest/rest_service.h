// The KServe v2 REST API (and Triton's binary tensor, model repository,
// configuration and statistics extensions) on an HttpServer: the paths of
// rest_routes.h, each converted to the InferenceCore's protobuf messages
// and back, so that REST and gRPC share one implementation of every
// operation (authorization, validation, statistics and metrics included).
//
// Triton's generate extension: generate and generate_stream (server-sent
// events), rest_generate_call.h.
//
// Answers are JSON; errors are {"error": "<message>"} with the HTTP status
// of the core's status (status_conversion.h). The health paths answer 200
// {"live": true} / {"ready": true}, or 503 when not ready; a model's ready
// path 200 or 503 with {"name", "ready"}. Load and unload answer 200 with
// an empty body. A token (the Authorization header, "Bearer <token>") is
// checked before a request's body is read. A client that closes its
// connection cancels its inference like a cancelled gRPC call.
//
// Thread-safe. The core and the executor must outlive the service, and the
// service the HttpServer that serves it.
#ifndef CASTSERVE_SERVER_REST_REST_SERVICE_H_
#define CASTSERVE_SERVER_REST_REST_SERVICE_H_

#include <optional>

#include "platform/executor.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"
#include "server/rest/rest_routes.h"

namespace castserve {

class RestService : public HttpService {
 public:
  // Inference bodies larger than this are decoded on `executor` (may be
  // null: platform::Executor::Default()), not on the polling thread.
  static constexpr size_t kInlineDecodeBytes = 256 * 1024;

  RestService(InferenceCore* core, platform::Executor* executor);

  std::optional<HttpResponse> Screen(const HttpRequest& head) override;
  void Handle(HttpRequest request, HttpReply reply,
              HttpClientGone client_gone) override;

 private:
  void Infer(const RestRoute& route, HttpRequest request, CallContext call,
             HttpReply reply);
  // generate and generate_stream (rest_generate_call.h).
  void Generate(const RestRoute& route, HttpRequest request, CallContext call,
                HttpReply reply);

  InferenceCore* const core_;
  platform::Executor* const executor_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_SERVICE_H_
