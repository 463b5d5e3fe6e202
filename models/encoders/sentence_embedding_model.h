// Sentence-transformers pipelines: a folder whose `modules.json` lists the
// Transformer (the folder's own checkpoint), a Pooling module and optionally
// Normalize serves, next to the transformer's outputs, the sentence embedding
// sentence-transformers computes:
//
//   sentence_embedding  float32 [batch, dim x modes]
//
// pooled from last_hidden_state with the attention mask (all ones when the
// request has none) as the Pooling module's config.json says
// (sentence_pooling.h), then L2-normalised when Normalize is listed.
//
// What castserve reads of the folder (sentence-transformers' files, in the
// classic layout the hub's models ship or the one sentence-transformers 6
// writes):
//   modules.json               a list of {"type", "path", ...}; the types
//                              must be sentence_transformers.models.
//                              Transformer (path ""), Pooling, and
//                              optionally Normalize, in that order (6:
//                              sentence_transformers.base.modules.
//                              transformer.Transformer, sentence_transformer.
//                              modules.pooling.Pooling, base.modules.
//                              normalize.Normalize)
//   <Pooling path>/config.json the pooling modes (sentence_pooling.h)
//   sentence_bert_config.json  optional: max_seq_length (where text is
//                              truncated); do_lower_case must be false;
//                              6's transformer_task, module_output_name and
//                              modality_config must describe token
//                              embeddings from last_hidden_state of text
//   tokenizer_config.json      model_max_length, where text is truncated
//                              without max_seq_length (as
//                              sentence-transformers does; 6 writes no
//                              max_seq_length)
// Any other module (Dense, LayerNorm, ...) or order is InvalidArgument naming
// the file, as is a malformed file: castserve never serves an embedding that
// differs from the pipeline's.
#ifndef CASTSERVE_MODELS_ENCODERS_SENTENCE_EMBEDDING_MODEL_H_
#define CASTSERVE_MODELS_ENCODERS_SENTENCE_EMBEDDING_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/encoders/sentence_pooling.h"
#include "models/model.h"
#include "platform/file_system.h"

namespace castserve::models {

// The output every sentence-transformers model gains.
inline constexpr char kSentenceEmbeddingOutput[] = "sentence_embedding";

// What runs after the Transformer module. A value.
struct SentenceTransformerConfig {
  PoolingConfig pooling;
  bool normalize = false;
  // sentence_bert_config.json's max_seq_length, else tokenizer_config.json's
  // model_max_length (within kConfigSizeLimits); nullopt when neither.
  std::optional<int64_t> max_seq_length;

  // Reads `folder`'s modules.json and the files it leads to through
  // `file_system`. nullopt when the folder has no modules.json (not a
  // sentence-transformers folder); InvalidArgument naming the file and the
  // offending entry for a malformed or unsupported pipeline (errors reading
  // a file keep their code).
  static absl::StatusOr<std::optional<SentenceTransformerConfig>> Load(
      const std::string& folder,
      platform::FileSystem* file_system = platform::FileSystem::Default());
};

// A model with the pipeline's pooling (and normalisation) after its
// forward. Its inputs, limits, root and device are the wrapped model's; its
// outputs are the wrapped model's plus sentence_embedding. Thread-safe as
// the wrapped model.
class SentenceEmbeddingModel final : public Model {
 public:
  // InvalidArgument when `model` takes no input_ids or gives no
  // last_hidden_state [batch, seq, hidden] whose hidden size is the pooling
  // config's word_embedding_dimension.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      std::unique_ptr<Model> model, SentenceTransformerConfig config);

  std::string architecture() const override { return model_->architecture(); }
  const std::vector<TensorSpec>& inputs() const override {
    return model_->inputs();
  }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  Module& root() override { return model_->root(); }
  casting::Device device() const override { return model_->device(); }
  PrefetchCounts prefetch_counts() const override {
    return model_->prefetch_counts();
  }
  // The smaller of the wrapped model's and max_seq_length.
  std::optional<int64_t> max_sequence_length() const override;

  const SentenceTransformerConfig& config() const { return config_; }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override {
    return ValidateInputsOf(*model_, inputs);
  }
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override;

 private:
  SentenceEmbeddingModel(std::unique_ptr<Model> model,
                         SentenceTransformerConfig config);

  const std::unique_ptr<Model> model_;
  const SentenceTransformerConfig config_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_SENTENCE_EMBEDDING_MODEL_H_
