// A Tokenizer over a tokenizer.json: the `tokenizers` library's pipeline
// (added tokens -> normalizer -> pre-tokenizer -> model -> truncation ->
// post-processor), each stage as the file declares it.
//
// Immutable after Create; every method is thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_JSON_TOKENIZER_H_
#define CASTSERVE_TEXT_PIPELINE_JSON_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/pipeline/added_vocabulary.h"
#include "text/pipeline/decoder.h"
#include "text/pipeline/model.h"
#include "text/pipeline/normalizer.h"
#include "text/pipeline/post_processor.h"
#include "text/pipeline/pre_tokenizer.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/tokenizer.h"

namespace castserve::text {

class JsonTokenizer : public Tokenizer {
 public:
  // InvalidArgument naming the field for what the pipeline cannot run.
  static absl::StatusOr<std::unique_ptr<JsonTokenizer>> Create(
      const TokenizerSpec& spec);
  // The same from the text of a tokenizer.json.
  static absl::StatusOr<std::unique_ptr<JsonTokenizer>> FromJson(
      std::string_view json);

  absl::StatusOr<Encoding> Encode(std::string_view text,
                                  const EncodeOptions& options) const override;
  absl::StatusOr<Encoding> EncodePair(
      std::string_view first, std::string_view second,
      const EncodeOptions& options) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids,
                                     bool skip_special_tokens) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> TokenToId(std::string_view token) const override;
  std::optional<int64_t> pad_id() const override { return pad_id_; }

 private:
  JsonTokenizer() = default;
  // The ids of `text` before truncation and post-processing.
  absl::StatusOr<std::vector<int64_t>> Tokenize(std::string_view text) const;
  // Normalizes, pre-tokenizes and tokenizes a piece between added tokens.
  // `starts_text`: no added token precedes the piece.
  absl::Status TokenizeText(absl::string_view text, bool starts_text,
                            std::vector<int64_t>* ids) const;
  absl::Status TokenizeNormalized(absl::string_view text, bool starts_text,
                                  std::vector<int64_t>* ids) const;

  std::unique_ptr<Normalizer> normalizer_;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // may be null
  std::unique_ptr<Model> model_;
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::optional<int64_t> pad_id_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_JSON_TOKENIZER_H_
