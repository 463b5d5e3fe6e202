#include "server/openai/openai_service.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/http/head_screen.h"
#include "server/openai/openai_calls.h"
#include "server/openai/openai_completion_call.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_requests.h"

namespace castserve::openai {
namespace {

CallContext CallFrom(const HttpRequest& request, HttpClientGone client_gone) {
  CallContext call;
  call.authorization = request.header("authorization");
  call.is_cancelled = std::move(client_gone);
  return call;
}

// Decodes the body of a POST endpoint and starts its call.
void DecodeAndServe(InferenceCore* core, Endpoint endpoint,
                    const std::string& body, CallContext call,
                    HttpReply reply) {
  auto refuse = [&](const absl::Status& status) {
    reply(ErrorResponse(core->RefuseInference(status)));
  };
  switch (endpoint) {
    case Endpoint::kEmbeddings: {
      absl::StatusOr<EmbeddingsRequest> request = DecodeEmbeddingsRequest(body);
      if (!request.ok()) return refuse(request.status());
      return ServeEmbeddings(core, std::move(call), *std::move(request),
                             std::move(reply));
    }
    case Endpoint::kRerank: {
      absl::StatusOr<RerankRequest> request = DecodeRerankRequest(body);
      if (!request.ok()) return refuse(request.status());
      return ServeRerank(core, std::move(call), *std::move(request),
                         std::move(reply));
    }
    default: {
      absl::StatusOr<CompletionRequest> request =
          DecodeCompletionRequest(body, endpoint == Endpoint::kChatCompletions);
      if (!request.ok()) return refuse(request.status());
      return OpenAiCompletionCall::Start(core, *std::move(request),
                                         std::move(call), std::move(reply));
    }
  }
}

}  // namespace

EndpointMatch MatchEndpoint(absl::string_view method, absl::string_view path) {
  EndpointMatch match;
  const bool get = method == "GET" || method == "HEAD";
  const bool post = method == "POST";
  auto route = [&](Endpoint endpoint, bool allowed, const char* allow) {
    if (allowed) {
      match.endpoint = endpoint;
    } else {
      match.status_code = 405;
      match.allow = allow;
    }
    return match;
  };
  if (path == "/v1/models")
    return route(Endpoint::kListModels, get, "GET, HEAD");
  if (absl::StartsWith(path, "/v1/models/")) {
    absl::string_view id = path.substr(sizeof("/v1/models/") - 1);
    if (id.empty() || absl::StrContains(id, '/')) return match;
    match.model = std::string(id);
    return route(Endpoint::kGetModel, get, "GET, HEAD");
  }
  if (path == "/v1/embeddings")
    return route(Endpoint::kEmbeddings, post, "POST");
  if (path == "/v1/completions") {
    return route(Endpoint::kCompletions, post, "POST");
  }
  if (path == "/v1/chat/completions") {
    return route(Endpoint::kChatCompletions, post, "POST");
  }
  if (path == "/v1/rerank" || path == "/rerank") {
    return route(Endpoint::kRerank, post, "POST");
  }
  return match;
}

OpenAiService::OpenAiService(InferenceCore* core, platform::Executor* executor)
    : core_(core),
      executor_(executor != nullptr ? executor
                                    : &platform::Executor::Default()) {}

std::optional<HttpResponse> OpenAiService::Screen(const HttpRequest& head) {
  EndpointMatch match = MatchEndpoint(head.method, head.path);
  if (std::optional<HttpResponse> refusal = RefuseHead(
          head, {match.endpoint.has_value(), match.status_code, match.allow},
          "OpenAI API", [](int status_code, absl::string_view message) {
            return ErrorResponse(status_code, message);
          })) {
    return refusal;
  }
  // Before the body is read: a caller without a token cannot make the
  // server hold a large body.
  const CallContext call = CallFrom(head, nullptr);
  const bool inference = *match.endpoint != Endpoint::kListModels &&
                         *match.endpoint != Endpoint::kGetModel;
  absl::Status allowed = inference ? core_->AuthorizeInference(call)
                                   : core_->Authorize(call, Scope::kInfer);
  if (!allowed.ok()) return ErrorResponse(allowed);
  return std::nullopt;
}

void OpenAiService::Handle(HttpRequest request, HttpReply reply,
                           HttpClientGone client_gone) {
  // Screen let only matched requests through.
  const EndpointMatch match = MatchEndpoint(request.method, request.path);
  CallContext call = CallFrom(request, std::move(client_gone));
  switch (*match.endpoint) {
    case Endpoint::kListModels:
      return ServeModels(core_, std::move(call), "", std::move(reply));
    case Endpoint::kGetModel:
      return ServeModels(core_, std::move(call), match.model, std::move(reply));
    default:
      break;
  }
  const bool inline_decode = request.body.size() <= kInlineDecodeBytes;
  auto decode = [core = core_, endpoint = *match.endpoint,
                 body = std::move(request.body), call = std::move(call),
                 reply = std::move(reply)]() mutable {
    DecodeAndServe(core, endpoint, body, std::move(call), std::move(reply));
  };
  if (inline_decode) return decode();
  executor_->Schedule(std::move(decode));
}

}  // namespace castserve::openai
