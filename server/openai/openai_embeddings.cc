// POST /v1/embeddings: one sentence_embedding request per input.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/openai/openai_calls.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

constexpr char kEmbeddingOutput[] = "sentence_embedding";
// A model whose pipeline normalises answers unit vectors, up to f32
// rounding; its truncated embeddings are normalised again.
constexpr double kUnitNormTolerance = 1e-4;

double Norm(const std::vector<float>& values) {
  double sum = 0;
  for (float v : values) sum += double{v} * v;
  return std::sqrt(sum);
}

// Matryoshka: the first `dimensions` values, normalised again when the
// whole embedding was a unit vector.
void Truncate(int64_t dimensions, std::vector<float>* embedding) {
  const bool unit = std::abs(Norm(*embedding) - 1) <= kUnitNormTolerance;
  embedding->resize(static_cast<size_t>(dimensions));
  if (!unit) return;
  const double norm = Norm(*embedding);
  if (norm == 0) return;
  for (float& v : *embedding) v = static_cast<float>(v / norm);
}

json EmbeddingValue(const std::vector<float>& embedding, bool base64) {
  if (!base64) return embedding;
  // Little-endian f32, as OpenAI's base64 encoding_format sends them.
  return absl::Base64Escape(
      absl::string_view(reinterpret_cast<const char*>(embedding.data()),
                        embedding.size() * sizeof(float)));
}

absl::StatusOr<json> Answer(
    const EmbeddingsRequest& request,
    std::vector<inference::ModelInferResponse>& responses) {
  json data = json::array();
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < responses.size(); ++i) {
    absl::StatusOr<std::vector<float>> embedding =
        Fp32Output(responses[i], kEmbeddingOutput);
    if (!embedding.ok()) return embedding.status();
    if (request.dimensions.has_value()) {
      if (*request.dimensions > static_cast<int64_t>(embedding->size())) {
        return InvalidField(
            "dimensions",
            absl::StrCat("'dimensions' must be at most the model's ",
                         embedding->size(), ", got ", *request.dimensions));
      }
      Truncate(*request.dimensions, &*embedding);
    }
    prompt_tokens += IntParameter(responses[i], "prompt_tokens").value_or(0);
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", EmbeddingValue(*embedding, request.base64)}});
  }
  return json{
      {"object", "list"},
      {"data", std::move(data)},
      {"model", request.model},
      {"usage",
       {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace

void ServeEmbeddings(InferenceCore* core, CallContext call,
                     EmbeddingsRequest request, HttpReply reply) {
  const std::string model = request.model;
  WithModelConfig(
      core, call, model,
      [core, call, request = std::move(request), reply = std::move(reply)](
          absl::StatusOr<inference::ModelConfig> config) mutable {
        if (!config.ok()) return reply(ErrorResponse(config.status()));
        if (KindOf(*config) != ModelKind::kEmbedding) {
          return reply(ErrorResponse(
              core->RefuseInference(WrongKind(*config, "/v1/embeddings"))));
        }
        std::vector<inference::ModelInferRequest> requests;
        for (const TextOrTokens& input : request.inputs) {
          inference::ModelInferRequest& infer = requests.emplace_back();
          infer.set_model_name(request.model);
          if (input.is_tokens) {
            AddTokenInputs(*config, input.tokens, &infer);
          } else {
            AddBytesInput(*config, "text", input.text, &infer);
          }
          infer.add_outputs()->set_name(kEmbeddingOutput);
        }
        auto shared = std::make_shared<EmbeddingsRequest>(std::move(request));
        InferAndAnswer(
            core, call, std::move(requests),
            [shared](std::vector<inference::ModelInferResponse>& responses) {
              return Answer(*shared, responses);
            },
            std::move(reply));
      });
}

}  // namespace castserve::openai
