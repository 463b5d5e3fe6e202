// A Tokenizer over a SentencePiece model (tokenizer.model), through
// Debian's libsentencepiece. Ids equal the `sentencepiece` Python library's
// encode(text) (no sampling). With add_special_tokens the model's BOS piece,
// when it has one, goes first (as Llama's tokenizers do); no EOS is added.
// Decode with skip_special_tokens drops control pieces (BOS, EOS, PAD).
//
// Immutable after Create; every method is thread-safe.
#ifndef CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_TOKENIZER_H_
#define CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/sentencepiece/sentencepiece_model.h"
#include "text/tokenizer.h"

namespace castserve::text {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // InvalidArgument naming the file when it is not a SentencePiece model.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Create(
      const std::string& model_path);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<Encoding> Encode(std::string_view text,
                                  const EncodeOptions& options) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids,
                                     bool skip_special_tokens) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> TokenToId(std::string_view token) const override;
  std::optional<int64_t> pad_id() const override;

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model);

  const std::unique_ptr<SentencePieceModel> model_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_TOKENIZER_H_
