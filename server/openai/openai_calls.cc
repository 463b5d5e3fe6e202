#include "server/openai/openai_calls.h"

#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {

void WithModelConfig(
    InferenceCore* core, const CallContext& call, const std::string& model,
    std::function<void(absl::StatusOr<inference::ModelConfig>)> then) {
  auto request = std::make_shared<inference::ModelConfigRequest>();
  request->set_name(model);
  auto response = std::make_shared<inference::ModelConfigResponse>();
  CallContext context;
  context.authorization = call.authorization;
  context.deadline = call.deadline;
  core->ModelConfig(
      std::move(context), *request, response.get(),
      [core, request, response, then = std::move(then)](absl::Status status) {
        if (!status.ok()) return then(core->RefuseInference(status));
        then(std::move(*response->mutable_config()));
      });
}

void InferAll(InferenceCore* core, const CallContext& call,
              std::vector<inference::ModelInferRequest> requests,
              std::function<void(absl::Status,
                                 std::vector<inference::ModelInferResponse>)>
                  then) {
  struct Join {
    std::vector<inference::ModelInferRequest> requests;
    std::vector<inference::ModelInferResponse> responses;
    std::function<void(absl::Status,
                       std::vector<inference::ModelInferResponse>)>
        then;
    absl::Mutex mutex;
    size_t left ABSL_GUARDED_BY(mutex) = 0;
    absl::Status status ABSL_GUARDED_BY(mutex);
  };
  auto join = std::make_shared<Join>();
  join->requests = std::move(requests);
  join->responses.resize(join->requests.size());
  join->then = std::move(then);
  join->left = join->requests.size();
  const size_t count = join->requests.size();
  if (count == 0) return join->then(absl::OkStatus(), {});
  for (size_t i = 0; i < count; ++i) {
    CallContext context;
    context.authorization = call.authorization;
    context.deadline = call.deadline;
    context.is_cancelled = call.is_cancelled;
    core->ModelInfer(std::move(context), join->requests[i], &join->responses[i],
                     [join](absl::Status status) {
                       bool last = false;
                       absl::Status first;
                       {
                         absl::MutexLock lock(&join->mutex);
                         join->status.Update(status);
                         last = --join->left == 0;
                         first = join->status;
                       }
                       if (last) {
                         join->then(first, std::move(join->responses));
                       }
                     });
  }
}

void InferAndAnswer(InferenceCore* core, const CallContext& call,
                    std::vector<inference::ModelInferRequest> requests,
                    std::function<absl::StatusOr<nlohmann::json>(
                        std::vector<inference::ModelInferResponse>&)>
                        answer,
                    HttpReply reply) {
  InferAll(
      core, call, std::move(requests),
      [answer = std::move(answer), reply = std::move(reply)](
          absl::Status status,
          std::vector<inference::ModelInferResponse> responses) {
        if (!status.ok()) return reply(ErrorResponse(status));
        absl::StatusOr<nlohmann::json> body = answer(responses);
        reply(body.ok() ? JsonAnswer(*body) : ErrorResponse(body.status()));
      });
}

absl::Status WrongKind(const inference::ModelConfig& config,
                       absl::string_view endpoint) {
  return InvalidField(
      "model",
      absl::StrCat("model '", config.name(), "' is a ", KindName(config),
                   " model: it does not answer ", endpoint));
}

HttpResponse JsonAnswer(const nlohmann::json& body) {
  return {200,
          "application/json",
          body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
          {}};
}

uint64_t RandomUint64() {
  static absl::Mutex mutex(absl::kConstInit);
  static std::mt19937_64* const generator =
      new std::mt19937_64(std::random_device{}());
  absl::MutexLock lock(&mutex);
  return (*generator)();
}

std::string RandomId(absl::string_view prefix) {
  return absl::StrCat(prefix, "-", absl::Hex(RandomUint64(), absl::kZeroPad16),
                      absl::Hex(RandomUint64() >> 32, absl::kZeroPad8));
}

}  // namespace castserve::openai
