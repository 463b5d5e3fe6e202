// RestGenerateCall: one REST generate or generate_stream request through
// the InferenceCore: the model's metadata (for its inputs' datatypes), the
// body decoded (rest_generate_codec.h), then ModelInfer.
//
// generate answers one JSON object. generate_stream answers 200 with
// Content-Type text/event-stream once the first response is in, one
// server-sent event per response (the core's partial responses, then the
// final one, which has "finish_reason"), and ends the body after the
// final one. An error before the first event is an HTTP error with
// {"error": "..."}; after it, one event {"error": "..."} and the end. The
// client closing its connection cancels the call (the HttpServer's
// client_gone is the call's is_cancelled); a client that falls more than
// kMaxPendingStreamBytes behind is cut off, which cancels it too.
//
// Tested end to end in rest_service_test.cc. Thread-safe: the events come
// from the model's thread, in order.
#ifndef CASTSERVE_SERVER_REST_REST_GENERATE_CALL_H_
#define CASTSERVE_SERVER_REST_REST_GENERATE_CALL_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "server/core/inference_core.h"
#include "server/http/http_body_stream.h"
#include "server/http/http_server.h"
#include "server/rest/rest_routes.h"

namespace castserve {

class RestGenerateCall : public std::enable_shared_from_this<RestGenerateCall> {
 public:
  // Events written and not yet sent, at most.
  static constexpr size_t kMaxPendingStreamBytes = 1 << 20;

  // Starts the call; `reply` gets its answer. `core` must outlive it.
  static void Start(InferenceCore* core, const RestRoute& route,
                    std::string body, CallContext call, HttpReply reply);

 private:
  RestGenerateCall(InferenceCore* core, const RestRoute& route,
                   std::string body, CallContext call, HttpReply reply);

  void Run(const inference::ModelMetadataResponse& metadata);
  // One response as an event: the answer's head for the first, then on the
  // stream.
  void Event(const inference::ModelInferResponse& response);
  void Finish(const absl::Status& status);
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Send(std::string event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  InferenceCore* const core_;
  const RestRoute route_;
  const bool streaming_;
  std::string body_;
  CallContext call_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  const std::shared_ptr<HttpBodyStream> stream_;

  absl::Mutex mutex_;
  HttpReply reply_ ABSL_GUARDED_BY(mutex_);
  // Set once the answer (or the stream's head) was given.
  bool answered_ ABSL_GUARDED_BY(mutex_) = false;
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_REST_REST_GENERATE_CALL_H_
