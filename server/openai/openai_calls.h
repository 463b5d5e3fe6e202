// The OpenAI endpoints' work over the InferenceCore, one function per
// endpoint (openai_models.cc, openai_embeddings.cc, openai_rerank.cc; the
// completions in openai_completion_call.h), and what they share: the
// model's config, several inference requests run at once, JSON answers.
// Every function answers through `reply` exactly once, from any thread.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_CALLS_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_CALLS_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/inference.pb.h"
#include "proto/model_config.pb.h"
#include "server/core/inference_core.h"
#include "server/http/http_server.h"
#include "server/openai/openai_requests.h"

namespace castserve::openai {

// GET /v1/models (`id` empty) and /v1/models/{id}.
void ServeModels(InferenceCore* core, CallContext call, const std::string& id,
                 HttpReply reply);
void ServeEmbeddings(InferenceCore* core, CallContext call,
                     EmbeddingsRequest request, HttpReply reply);
void ServeRerank(InferenceCore* core, CallContext call, RerankRequest request,
                 HttpReply reply);

// The effective config of `model` (loading a first_request model), through
// the core's ModelConfig (scope `infer`). A failure is counted as a refused
// inference request.
void WithModelConfig(
    InferenceCore* core, const CallContext& call, const std::string& model,
    std::function<void(absl::StatusOr<inference::ModelConfig>)> then);

// Runs every request through the core's ModelInfer at once (each with the
// call's token and cancellation) and calls `then` once all ended: OK with
// the responses in order, or the first failure.
void InferAll(InferenceCore* core, const CallContext& call,
              std::vector<inference::ModelInferRequest> requests,
              std::function<void(absl::Status,
                                 std::vector<inference::ModelInferResponse>)>
                  then);

// InferAll, then `reply` with the JSON `answer` builds from the responses
// (in order), or with the error of the first failure or of `answer`.
void InferAndAnswer(InferenceCore* core, const CallContext& call,
                    std::vector<inference::ModelInferRequest> requests,
                    std::function<absl::StatusOr<nlohmann::json>(
                        std::vector<inference::ModelInferResponse>&)>
                        answer,
                    HttpReply reply);

// INVALID_ARGUMENT naming `model` and its kind for a model that does not
// answer `endpoint` ("embeddings", ...), param "model".
absl::Status WrongKind(const inference::ModelConfig& config,
                       absl::string_view endpoint);

// 200 with `body`; invalid UTF-8 becomes U+FFFD.
HttpResponse JsonAnswer(const nlohmann::json& body);
// A draw of a generator seeded from std::random_device. Thread-safe.
uint64_t RandomUint64();
// "<prefix>-" and 24 random hex digits.
std::string RandomId(absl::string_view prefix);

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_CALLS_H_
