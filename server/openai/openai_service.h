// The OpenAI API (https://platform.openai.com/docs/api-reference) on the
// REST port, beside KServe v2, over the same InferenceCore: the same
// tokens and scopes (`infer`), limits, statistics and metrics, since every
// model call is a core ModelInfer.
//
//   GET  /v1/models, /v1/models/{id}   READY models that answer one of below
//   POST /v1/embeddings                sentence-embedding models
//   POST /v1/completions               generation models
//   POST /v1/chat/completions          generation models with a chat template
//   POST /v1/rerank, /rerank           rerankers (BYTES query and document,
//                                      FP32 scores: one logit per pair)
//
// Bodies are decoded once (openai_requests.h); errors are OpenAI's
// {"error": {"message", "type", "param", "code"}} (openai_errors.h) with the
// HTTP status the KServe path gives. An embeddings call's consecutive texts
// go as one batched inference request (at most max_batch_size texts each;
// a token array alone), each rerank document as its own, all through the
// model's dynamic batching; each completion choice is its own sequence
// (openai_completion_call.h). docs/PROTOCOL.md lists the fields.
//
// Thread-safe. The core and the executor must outlive the service, and the
// service the HttpServer that serves it.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_SERVICE_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_SERVICE_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "platform/executor.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"

namespace castserve::openai {

enum class Endpoint {
  kListModels,
  kGetModel,
  kEmbeddings,
  kCompletions,
  kChatCompletions,
  kRerank,
};

// The endpoint of `method` and `path`, with the model id of /v1/models/{id}
// in `model`; nullopt with the HTTP refusal's status (404, or 405 with the
// allowed method in `allow`).
struct EndpointMatch {
  std::optional<Endpoint> endpoint;
  std::string model;
  int status_code = 404;
  std::string allow;
};
EndpointMatch MatchEndpoint(absl::string_view method, absl::string_view path);

class OpenAiService : public HttpService {
 public:
  // Bodies larger than this are decoded on the executor.
  static constexpr size_t kInlineDecodeBytes = 256 * 1024;

  // `executor` may be null: platform::Executor::Default().
  OpenAiService(InferenceCore* core, platform::Executor* executor);

  std::optional<HttpResponse> Screen(const HttpRequest& head) override;
  void Handle(HttpRequest request, HttpReply reply,
              HttpClientGone client_gone) override;

 private:
  InferenceCore* const core_;
  platform::Executor* const executor_;
};

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_SERVICE_H_
