// WordPiece as the `tokenizers` library runs it: greedy longest match first,
// pieces after the first carrying the continuing-subword prefix ("##"); a
// word with a part no token covers, or longer than max_input_chars_per_word
// characters, becomes the unknown token as a whole.
#ifndef CASTSERVE_TEXT_PIPELINE_WORD_PIECE_H_
#define CASTSERVE_TEXT_PIPELINE_WORD_PIECE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/pipeline/model.h"
#include "text/pipeline/tokenizer_json.h"

namespace castserve::text {

class WordPiece : public Model {
 public:
  // InvalidArgument naming "model.unk_token" when the unknown token is
  // missing from the vocabulary.
  static absl::StatusOr<std::unique_ptr<WordPiece>> Create(
      const ModelSpec& spec);

  absl::Status Tokenize(absl::string_view word,
                        std::vector<int64_t>* ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }

 private:
  WordPiece(Vocabulary vocabulary, int64_t unk_id, std::string prefix,
            int64_t max_input_chars_per_word);

  const Vocabulary vocabulary_;
  const int64_t unk_id_;
  const std::string prefix_;
  const int64_t max_input_chars_per_word_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_WORD_PIECE_H_
