// POST /v1/embeddings: the inputs as sentence_embedding requests through
// the model's dynamic batching. Consecutive texts go together, up to the
// model's max_batch_size, as one batched request (`text` [n, 1]), as a
// KServe client sends them: the batcher pads them to their longest and runs
// them in one forward (and may still join the request with other clients'
// of the same padded length). Each token array is its own request: arrays
// of different lengths do not share a tensor.
#include <algorithm>
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

// The inference requests of `request`'s inputs, and how many inputs each
// carries (in order).
std::vector<inference::ModelInferRequest> InferRequests(
    const inference::ModelConfig& config, const EmbeddingsRequest& request,
    std::vector<size_t>* inputs_per_request) {
  const size_t max_texts =
      static_cast<size_t>(std::max<int64_t>(config.max_batch_size(), 1));
  std::vector<inference::ModelInferRequest> requests;
  std::vector<absl::string_view> texts;
  auto add = [&]() -> inference::ModelInferRequest& {
    inference::ModelInferRequest& infer = requests.emplace_back();
    infer.set_model_name(request.model);
    infer.add_outputs()->set_name(kEmbeddingOutput);
    return infer;
  };
  auto flush_texts = [&] {
    if (texts.empty()) return;
    inference::ModelInferRequest& infer = add();
    if (config.max_batch_size() > 0) {
      AddBytesInputs(config, "text", texts, &infer);
    } else {
      AddBytesInput(config, "text", texts.front(), &infer);
    }
    inputs_per_request->push_back(texts.size());
    texts.clear();
  };
  for (const TextOrTokens& input : request.inputs) {
    if (!input.is_tokens) {
      texts.push_back(input.text);
      if (texts.size() == max_texts) flush_texts();
      continue;
    }
    flush_texts();
    AddTokenInputs(config, input.tokens, &add());
    inputs_per_request->push_back(1);
  }
  flush_texts();
  return requests;
}

absl::StatusOr<json> Answer(
    const EmbeddingsRequest& request,
    const std::vector<size_t>& inputs_per_request,
    std::vector<inference::ModelInferResponse>& responses) {
  json data = json::array();
  int64_t prompt_tokens = 0;
  size_t index = 0;
  for (size_t i = 0; i < responses.size(); ++i) {
    absl::StatusOr<std::vector<float>> embeddings =
        Fp32Output(responses[i], kEmbeddingOutput);
    if (!embeddings.ok()) return embeddings.status();
    const size_t rows = inputs_per_request[i];
    if (embeddings->empty() || embeddings->size() % rows != 0) {
      return absl::InternalError(absl::StrCat("the model's ", kEmbeddingOutput,
                                              " holds ", embeddings->size(),
                                              " values for ", rows, " inputs"));
    }
    const size_t width = embeddings->size() / rows;
    for (size_t row = 0; row < rows; ++row, ++index) {
      std::vector<float> embedding(embeddings->begin() + row * width,
                                   embeddings->begin() + (row + 1) * width);
      if (request.dimensions.has_value()) {
        if (*request.dimensions > static_cast<int64_t>(width)) {
          return InvalidField(
              "dimensions",
              absl::StrCat("'dimensions' must be at most the model's ", width,
                           ", got ", *request.dimensions));
        }
        Truncate(*request.dimensions, &embedding);
      }
      data.push_back(
          {{"object", "embedding"},
           {"index", index},
           {"embedding", EmbeddingValue(embedding, request.base64)}});
    }
    prompt_tokens += IntParameter(responses[i], "prompt_tokens").value_or(0);
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
        auto inputs_per_request = std::make_shared<std::vector<size_t>>();
        std::vector<inference::ModelInferRequest> requests =
            InferRequests(*config, request, inputs_per_request.get());
        auto shared = std::make_shared<EmbeddingsRequest>(std::move(request));
        InferAndAnswer(
            core, call, std::move(requests),
            [shared, inputs_per_request](
                std::vector<inference::ModelInferResponse>& responses) {
              return Answer(*shared, *inputs_per_request, responses);
            },
            std::move(reply));
      });
}

}  // namespace castserve::openai
