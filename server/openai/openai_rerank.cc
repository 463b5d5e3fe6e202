// POST /v1/rerank (and /rerank): one request per (query, document) pair to
// a reranker, whose `scores` output is one logit per pair; relevance_score
// is its sigmoid, as vLLM and text-embeddings-inference answer for a
// cross-encoder with one label (sentence-transformers' CrossEncoder.predict
// default activation for one label). A classifier of pairs with more labels
// is refused naming them.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/openai/openai_calls.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

absl::StatusOr<json> Answer(
    const RerankRequest& request,
    std::vector<inference::ModelInferResponse>& responses) {
  std::vector<double> scores;
  int64_t tokens = 0;
  for (const inference::ModelInferResponse& response : responses) {
    absl::StatusOr<std::vector<float>> logits = Fp32Output(response, "scores");
    if (!logits.ok()) return logits.status();
    if (logits->size() != 1) {
      return absl::InternalError(
          "the reranker's 'scores' output must hold one logit per pair");
    }
    scores.push_back(1 / (1 + std::exp(-double{logits->front()})));
    tokens += IntParameter(response, "prompt_tokens").value_or(0);
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  const size_t kept = std::min(
      order.size(), static_cast<size_t>(request.top_n.value_or(order.size())));
  json results = json::array();
  for (size_t i = 0; i < kept; ++i) {
    json result = {{"index", order[i]}, {"relevance_score", scores[order[i]]}};
    if (request.return_documents) {
      result["document"] = {{"text", request.documents[order[i]]}};
    }
    results.push_back(std::move(result));
  }
  return json{{"id", RandomId("rerank")},
              {"model", request.model},
              {"results", std::move(results)},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

// OK for a model that scores one label per pair (a reranker; a model
// whose config lists no labels is taken at its `scores` shape's word);
// InvalidArgument naming the model's labels for a classifier of pairs.
absl::Status CheckOneLabel(const inference::ModelConfig& config) {
  auto labels = config.parameters().find("castserve_score_labels");
  if (labels == config.parameters().end()) return absl::OkStatus();
  const json names = json::parse(labels->second.string_value(), nullptr,
                                 /*allow_exceptions=*/false);
  if (!names.is_array() || names.size() == 1) return absl::OkStatus();
  std::vector<std::string> texts;
  for (const json& name : names) {
    texts.push_back(name.is_string() ? name.get<std::string>() : name.dump());
  }
  return InvalidField(
      "model",
      absl::StrCat("model '", config.name(), "' scores ", names.size(),
                   " labels (", absl::StrJoin(texts, ", "),
                   "): /v1/rerank needs a reranker, which scores one"));
}

}  // namespace

void ServeRerank(InferenceCore* core, CallContext call, RerankRequest request,
                 HttpReply reply) {
  const std::string model = request.model;
  WithModelConfig(
      core, call, model,
      [core, call, request = std::move(request), reply = std::move(reply)](
          absl::StatusOr<inference::ModelConfig> config) mutable {
        if (!config.ok()) return reply(ErrorResponse(config.status()));
        absl::Status refused = KindOf(*config) != ModelKind::kReranker
                                   ? WrongKind(*config, "/v1/rerank")
                                   : CheckOneLabel(*config);
        if (!refused.ok()) {
          return reply(ErrorResponse(core->RefuseInference(refused)));
        }
        std::vector<inference::ModelInferRequest> requests;
        for (const std::string& document : request.documents) {
          inference::ModelInferRequest& infer = requests.emplace_back();
          infer.set_model_name(request.model);
          AddBytesInput(*config, "query", request.query, &infer);
          AddBytesInput(*config, "document", document, &infer);
          infer.add_outputs()->set_name("scores");
        }
        auto shared = std::make_shared<RerankRequest>(std::move(request));
        InferAndAnswer(
            core, call, std::move(requests),
            [shared](std::vector<inference::ModelInferResponse>& responses) {
              return Answer(*shared, responses);
            },
            std::move(reply));
      });
}

}  // namespace castserve::openai
