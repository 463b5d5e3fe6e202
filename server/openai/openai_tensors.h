// The KServe messages the OpenAI frontend sends and reads: requests of
// texts, token arrays or documents, their inputs shaped for the model's
// config, and the outputs and parameters of their answers. Stateless;
// thread-safe.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_TENSORS_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_TENSORS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/inference.pb.h"
#include "proto/model_config.pb.h"

namespace castserve::openai {

// What a served model can answer, from its effective config.
enum class ModelKind { kOther, kGeneration, kEmbedding, kReranker };
ModelKind KindOf(const inference::ModelConfig& config);
// "generation", "sentence embedding", "reranker", or the architecture.
std::string KindName(const inference::ModelConfig& config);
bool HasInput(const inference::ModelConfig& config, absl::string_view name);

// One BYTES element as input `name`: shape [1, 1] for a model that batches
// (max_batch_size > 0), else [1].
void AddBytesInput(const inference::ModelConfig& config,
                   const std::string& name, absl::string_view value,
                   inference::ModelInferRequest* request);
// Several BYTES elements as input `name` [n, 1] (a model that batches,
// n <= max_batch_size: one batched request, as a KServe client sends it).
void AddBytesInputs(const inference::ModelConfig& config,
                    const std::string& name,
                    const std::vector<absl::string_view>& values,
                    inference::ModelInferRequest* request);
// Token ids as input_ids [1, n] (or [n] without batching), with the
// attention_mask (ones) and token_type_ids (zeros) the model requires.
void AddTokenInputs(const inference::ModelConfig& config,
                    const std::vector<int64_t>& ids,
                    inference::ModelInferRequest* request);

// The FP32 output `name`, flat; INTERNAL when absent or malformed.
absl::StatusOr<std::vector<float>> Fp32Output(
    const inference::ModelInferResponse& response, absl::string_view name);
// The first element of the BYTES output `name`; "" when absent.
absl::StatusOr<std::string> BytesOutput(
    const inference::ModelInferResponse& response, absl::string_view name);
// Every element of the BYTES output `name`, flat; empty when absent.
// INTERNAL when malformed.
absl::StatusOr<std::vector<std::string>> BytesOutputs(
    const inference::ModelInferResponse& response, absl::string_view name);
// Elements of the output `name`; 0 when absent.
int64_t ElementCount(const inference::ModelInferResponse& response,
                     absl::string_view name);
std::optional<int64_t> IntParameter(
    const inference::ModelInferResponse& response, const std::string& name);
std::optional<std::string> StringParameter(
    const inference::ModelInferResponse& response, const std::string& name);

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_TENSORS_H_
