#include "server/rest/rest_service.h"

#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"
#include "server/http/head_screen.h"
#include "server/rest/proto_json.h"
#include "server/rest/rest_generate_call.h"
#include "server/rest/rest_infer_codec.h"
#include "server/rest/rest_responses.h"

namespace castserve {
namespace {

using nlohmann::json;

constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
// HttpRequest::headers holds names lower-cased.
constexpr char kHeaderLengthKey[] = "inference-header-content-length";
// Repository bodies: {"ready": ...} or {"parameters": {...}}.
constexpr int kMaxRepositoryJsonDepth = 4;

CallContext CallFrom(const HttpRequest& request, HttpClientGone client_gone) {
  CallContext call;
  call.authorization = request.header("authorization");
  call.is_cancelled = std::move(client_gone);
  return call;
}

// Runs `operation` and answers with `encode`'s response, or the error.
template <typename Request, typename Response>
void Run(InferenceCore* core, CoreOperation<Request, Response> operation,
         CallContext call, Request request,
         std::function<HttpResponse(const Response&)> encode, HttpReply reply) {
  auto messages = std::make_shared<std::pair<Request, Response>>(
      std::move(request), Response());
  (core->*operation)(std::move(call), messages->first, &messages->second,
                     [messages, encode = std::move(encode),
                      reply = std::move(reply)](absl::Status status) {
                       reply(status.ok() ? encode(messages->second)
                                         : RestErrorResponse(status));
                     });
}

// A JSON object body of a repository call; an empty body is {}.
absl::StatusOr<json> ObjectBody(const std::string& body) {
  if (body.empty()) return json::object();
  platform::JsonLimits limits;
  limits.max_depth = kMaxRepositoryJsonDepth;
  limits.max_bytes = kMaxRestJsonBytes;
  absl::StatusOr<json> parsed = platform::ParseJson(body, limits);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body must be a JSON object, got ",
                     platform::JsonTypeName(*parsed)));
  }
  return parsed;
}

// {"parameters": {key: bool | integer | string}} into `out`.
absl::Status RepositoryParameters(
    const json& body,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>*
        out) {
  auto parameters = body.find("parameters");
  if (parameters == body.end()) return absl::OkStatus();
  if (!parameters->is_object()) {
    return absl::InvalidArgumentError("\"parameters\" must be an object");
  }
  for (const auto& [key, value] : parameters->items()) {
    inference::ModelRepositoryParameter& parameter = (*out)[key];
    if (value.is_boolean()) {
      parameter.set_bool_param(value.get<bool>());
    } else if (value.is_number_integer() && !value.is_number_unsigned()) {
      parameter.set_int64_param(value.get<int64_t>());
    } else if (value.is_number_unsigned() &&
               value.get<uint64_t>() <=
                   uint64_t{std::numeric_limits<int64_t>::max()}) {
      parameter.set_int64_param(static_cast<int64_t>(value.get<uint64_t>()));
    } else if (value.is_string()) {
      parameter.set_string_param(value.get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", key,
                       "' must be a boolean, an integer or a string, "
                       "got ",
                       platform::JsonTypeName(value)));
    }
  }
  return absl::OkStatus();
}

HttpResponse Empty(int status_code) {
  return {status_code, kJsonContentType, "", {}};
}

template <typename Response>
HttpResponse AsJson(const Response& response) {
  return RestJsonResponse(200, ProtoToJson(response));
}

void ServeRepository(InferenceCore* core, const RestRoute& route,
                     const HttpRequest& http, CallContext call,
                     HttpReply reply) {
  absl::StatusOr<json> body = ObjectBody(http.body);
  if (!body.ok()) return reply(RestErrorResponse(body.status()));
  if (route.operation == RestOperation::kRepositoryIndex) {
    inference::RepositoryIndexRequest request;
    if (auto ready = body->find("ready"); ready != body->end()) {
      if (!ready->is_boolean()) {
        return reply(RestErrorResponse(
            absl::InvalidArgumentError("\"ready\" must be a boolean")));
      }
      request.set_ready(ready->get<bool>());
    }
    // Triton answers a bare array of the models.
    return Run<inference::RepositoryIndexRequest,
               inference::RepositoryIndexResponse>(
        core, &InferenceCore::RepositoryIndex, std::move(call), request,
        [](const inference::RepositoryIndexResponse& response) {
          json models = json::array();
          for (const auto& model : response.models()) {
            json entry = ProtoToJson(model);
            // The memory tier is a READY model's only.
            if (model.tier().empty()) entry.erase("tier");
            models.push_back(std::move(entry));
          }
          return RestJsonResponse(200, models);
        },
        std::move(reply));
  }
  if (route.operation == RestOperation::kRepositoryLoad) {
    inference::RepositoryModelLoadRequest request;
    request.set_model_name(route.model);
    if (absl::Status status =
            RepositoryParameters(*body, request.mutable_parameters());
        !status.ok()) {
      return reply(RestErrorResponse(status));
    }
    return Run<inference::RepositoryModelLoadRequest,
               inference::RepositoryModelLoadResponse>(
        core, &InferenceCore::RepositoryModelLoad, std::move(call), request,
        [](const auto&) { return Empty(200); }, std::move(reply));
  }
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(route.model);
  if (absl::Status status =
          RepositoryParameters(*body, request.mutable_parameters());
      !status.ok()) {
    return reply(RestErrorResponse(status));
  }
  Run<inference::RepositoryModelUnloadRequest,
      inference::RepositoryModelUnloadResponse>(
      core, &InferenceCore::RepositoryModelUnload, std::move(call), request,
      [](const auto&) { return Empty(200); }, std::move(reply));
}

// The server's GET paths: health and metadata.
void ServeServerQuery(InferenceCore* core, const RestRoute& route,
                      CallContext call, HttpReply reply) {
  using namespace inference;  // NOLINT: the message names below.
  switch (route.operation) {
    case RestOperation::kServerLive:
      return Run<ServerLiveRequest, ServerLiveResponse>(
          core, &InferenceCore::ServerLive, std::move(call), {},
          [](const ServerLiveResponse& response) {
            return RestJsonResponse(response.live() ? 200 : 503,
                                    {{"live", response.live()}});
          },
          std::move(reply));
    case RestOperation::kServerReady:
      return Run<ServerReadyRequest, ServerReadyResponse>(
          core, &InferenceCore::ServerReady, std::move(call), {},
          [](const ServerReadyResponse& response) {
            return RestJsonResponse(response.ready() ? 200 : 503,
                                    {{"ready", response.ready()}});
          },
          std::move(reply));
    default:  // kServerMetadata
      return Run<ServerMetadataRequest, ServerMetadataResponse>(
          core, &InferenceCore::ServerMetadata, std::move(call), {},
          AsJson<ServerMetadataResponse>, std::move(reply));
  }
}

// A model's GET paths: ready, metadata, config, statistics.
void ServeModelQuery(InferenceCore* core, const RestRoute& route,
                     CallContext call, HttpReply reply) {
  using namespace inference;  // NOLINT: the message names below.
  switch (route.operation) {
    case RestOperation::kModelReady: {
      ModelReadyRequest request;
      request.set_name(route.model);
      request.set_version(route.version);
      return Run<ModelReadyRequest, ModelReadyResponse>(
          core, &InferenceCore::ModelReady, std::move(call), request,
          [name = route.model](const ModelReadyResponse& response) {
            return RestJsonResponse(
                response.ready() ? 200 : 503,
                {{"name", name}, {"ready", response.ready()}});
          },
          std::move(reply));
    }
    case RestOperation::kModelMetadata: {
      ModelMetadataRequest request;
      request.set_name(route.model);
      request.set_version(route.version);
      return Run<ModelMetadataRequest, ModelMetadataResponse>(
          core, &InferenceCore::ModelMetadata, std::move(call), request,
          AsJson<ModelMetadataResponse>, std::move(reply));
    }
    case RestOperation::kModelConfig: {
      ModelConfigRequest request;
      request.set_name(route.model);
      request.set_version(route.version);
      // Triton answers the configuration itself, not the response around it.
      return Run<ModelConfigRequest, ModelConfigResponse>(
          core, &InferenceCore::ModelConfig, std::move(call), request,
          [](const ModelConfigResponse& response) {
            return RestJsonResponse(200, ProtoToJson(response.config()));
          },
          std::move(reply));
    }
    default: {  // kModelStatistics
      ModelStatisticsRequest request;
      request.set_name(route.model);
      request.set_version(route.version);
      return Run<ModelStatisticsRequest, ModelStatisticsResponse>(
          core, &InferenceCore::ModelStatistics, std::move(call), request,
          AsJson<ModelStatisticsResponse>, std::move(reply));
    }
  }
}

// The binary extension's header, when the request has it.
absl::StatusOr<std::optional<uint64_t>> HeaderLength(
    const HttpRequest& request) {
  auto it = request.headers.find(kHeaderLengthKey);
  if (it == request.headers.end()) return std::nullopt;
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(it->second, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kHeaderLength, ": '", it->second, "' is not a byte count"));
  }
  return bytes;
}

HttpResponse InferAnswer(const RestInferResponse& encoded) {
  if (!encoded.header_length.has_value()) {
    return {200, kJsonContentType, encoded.body, {}};
  }
  return {200,
          "application/octet-stream",
          encoded.body,
          {{kHeaderLength, absl::StrCat(*encoded.header_length)}}};
}

}  // namespace

RestService::RestService(InferenceCore* core, platform::Executor* executor)
    : core_(core),
      executor_(executor != nullptr ? executor
                                    : &platform::Executor::Default()) {}

std::optional<HttpResponse> RestService::Screen(const HttpRequest& head) {
  RouteMatch match = MatchRestRoute(head.method, head.path);
  if (std::optional<HttpResponse> refusal = RefuseHead(
          head, {match.route.has_value(), match.status_code, match.allow},
          "KServe v2", [](int status_code, absl::string_view message) {
            return RestErrorResponse(status_code, message);
          })) {
    return refusal;
  }
  const RestRoute& route = *match.route;
  if (!route.scope.has_value()) return std::nullopt;
  // Before the body is read: a caller without a token cannot make the
  // server hold a large body.
  const CallContext call = CallFrom(head, nullptr);
  const bool inference = route.operation == RestOperation::kModelInfer ||
                         route.operation == RestOperation::kModelGenerate ||
                         route.operation == RestOperation::kModelGenerateStream;
  absl::Status allowed = inference ? core_->AuthorizeInference(call)
                                   : core_->Authorize(call, *route.scope);
  if (!allowed.ok()) return RestErrorResponse(allowed);
  return std::nullopt;
}

void RestService::Handle(HttpRequest request, HttpReply reply,
                         HttpClientGone client_gone) {
  // Screen let only routed requests through.
  const RestRoute route = *MatchRestRoute(request.method, request.path).route;
  CallContext call = CallFrom(request, std::move(client_gone));
  switch (route.operation) {
    case RestOperation::kModelInfer:
      return Infer(route, std::move(request), std::move(call),
                   std::move(reply));
    case RestOperation::kModelGenerate:
    case RestOperation::kModelGenerateStream:
      return Generate(route, std::move(request), std::move(call),
                      std::move(reply));
    case RestOperation::kRepositoryIndex:
    case RestOperation::kRepositoryLoad:
    case RestOperation::kRepositoryUnload:
      return ServeRepository(core_, route, request, std::move(call),
                             std::move(reply));
    case RestOperation::kServerLive:
    case RestOperation::kServerReady:
    case RestOperation::kServerMetadata:
      return ServeServerQuery(core_, route, std::move(call), std::move(reply));
    default:
      return ServeModelQuery(core_, route, std::move(call), std::move(reply));
  }
}

void RestService::Infer(const RestRoute& route, HttpRequest request,
                        CallContext call, HttpReply reply) {
  const bool inline_decode = request.body.size() <= kInlineDecodeBytes;
  auto decode_and_run = [core = core_, route, request = std::move(request),
                         call = std::move(call),
                         reply = std::move(reply)]() mutable {
    absl::StatusOr<std::optional<uint64_t>> header_length =
        HeaderLength(request);
    absl::StatusOr<RestInferRequest> decoded =
        header_length.ok()
            ? DecodeRestInferRequest(request.body, *header_length, route.model,
                                     route.version)
            : header_length.status();
    if (!decoded.ok()) {
      return reply(RestErrorResponse(core->RefuseInference(decoded.status())));
    }
    struct Exchange {
      RestInferRequest request;
      inference::ModelInferResponse response;
    };
    auto exchange = std::make_shared<Exchange>();
    exchange->request = *std::move(decoded);
    // The body is not needed any more: let it go before the forward.
    request.body = std::string();
    core->ModelInfer(
        std::move(call), exchange->request.request, &exchange->response,
        [exchange, reply = std::move(reply)](absl::Status status) {
          if (!status.ok()) return reply(RestErrorResponse(status));
          absl::StatusOr<RestInferResponse> encoded = EncodeRestInferResponse(
              exchange->response, exchange->request.output_format);
          reply(encoded.ok() ? InferAnswer(*encoded)
                             : RestErrorResponse(encoded.status()));
        });
  };
  if (inline_decode) return decode_and_run();
  executor_->Schedule(std::move(decode_and_run));
}

void RestService::Generate(const RestRoute& route, HttpRequest request,
                           CallContext call, HttpReply reply) {
  const bool inline_start = request.body.size() <= kInlineDecodeBytes;
  auto start = [core = core_, route, body = std::move(request.body),
                call = std::move(call), reply = std::move(reply)]() mutable {
    RestGenerateCall::Start(core, route, std::move(body), std::move(call),
                            std::move(reply));
  };
  if (inline_start) return start();
  executor_->Schedule(std::move(start));
}

}  // namespace castserve
