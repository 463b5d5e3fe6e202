#include "server/rest/rest_generate_call.h"

#include <utility>

#include "server/rest/rest_generate_codec.h"
#include "server/rest/rest_responses.h"

namespace castserve {
namespace {

constexpr char kEventStream[] = "text/event-stream";

}  // namespace

void RestGenerateCall::Start(InferenceCore* core, const RestRoute& route,
                             std::string body, CallContext call,
                             HttpReply reply) {
  std::shared_ptr<RestGenerateCall> self(new RestGenerateCall(
      core, route, std::move(body), std::move(call), std::move(reply)));
  auto metadata_request = std::make_shared<inference::ModelMetadataRequest>();
  metadata_request->set_name(route.model);
  metadata_request->set_version(route.version);
  auto metadata = std::make_shared<inference::ModelMetadataResponse>();
  core->ModelMetadata(self->call_, *metadata_request, metadata.get(),
                      [self, metadata_request, metadata](absl::Status status) {
                        if (status.ok()) return self->Run(*metadata);
                        // Not yet an inference request: counted as refused.
                        self->Finish(self->core_->RefuseInference(status));
                      });
}

RestGenerateCall::RestGenerateCall(InferenceCore* core, const RestRoute& route,
                                   std::string body, CallContext call,
                                   HttpReply reply)
    : core_(core),
      route_(route),
      streaming_(route.operation == RestOperation::kModelGenerateStream),
      body_(std::move(body)),
      call_(std::move(call)),
      stream_(streaming_
                  ? std::make_shared<HttpBodyStream>(kMaxPendingStreamBytes)
                  : nullptr),
      reply_(std::move(reply)) {}

void RestGenerateCall::Run(const inference::ModelMetadataResponse& metadata) {
  absl::StatusOr<inference::ModelInferRequest> request =
      DecodeGenerateRequest(body_, route_.model, route_.version, metadata);
  body_ = std::string();
  if (!request.ok()) return Finish(core_->RefuseInference(request.status()));
  request_ = *std::move(request);
  CallContext call = std::move(call_);
  std::shared_ptr<RestGenerateCall> self = shared_from_this();
  if (streaming_) {
    call.partial_response = [self](inference::ModelInferResponse response) {
      self->Event(response);
    };
  }
  core_->ModelInfer(std::move(call), request_, &response_,
                    [self](absl::Status status) { self->Finish(status); });
}

void RestGenerateCall::Event(const inference::ModelInferResponse& response) {
  absl::StatusOr<std::string> encoded = EncodeGenerateResponse(response);
  absl::MutexLock lock(&mutex_);
  if (failed_) return;
  if (!encoded.ok()) return Fail(encoded.status());
  Send(ServerSentEvent(*encoded));
}

void RestGenerateCall::Finish(const absl::Status& status) {
  if (streaming_ && status.ok()) Event(response_);
  absl::MutexLock lock(&mutex_);
  if (!status.ok() && !failed_) Fail(status);
  if (streaming_) {
    stream_->Close();
    return;
  }
  if (failed_) return;
  absl::StatusOr<std::string> encoded = EncodeGenerateResponse(response_);
  if (!encoded.ok()) return Fail(encoded.status());
  answered_ = true;
  reply_({200, kJsonContentType, *std::move(encoded), {}});
}

void RestGenerateCall::Fail(const absl::Status& status) {
  failed_ = true;
  if (!answered_) {
    answered_ = true;
    return reply_(RestErrorResponse(status));
  }
  // Mid-stream: the status line went out long ago.
  stream_->Write(ServerSentEvent(
      RestJsonResponse(200, {{"error", std::string(status.message())}}).body));
}

void RestGenerateCall::Send(std::string event) {
  if (answered_) {
    stream_->Write(event);
    return;
  }
  answered_ = true;
  reply_({200,
          kEventStream,
          std::move(event),
          {{"Cache-Control", "no-cache"}},
          stream_});
}

}  // namespace castserve
