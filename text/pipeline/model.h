// tokenizer.json's "model": turns one pre-tokenized word into token ids.
//
// Implementations (word_piece.h, bpe.h, unigram.h) are immutable after Create
// and thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_MODEL_H_
#define CASTSERVE_TEXT_PIPELINE_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "text/pipeline/vocabulary.h"

namespace castserve::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (non-empty, valid UTF-8) to *ids.
  // InvalidArgument for a word the model cannot tokenize (a Unigram model
  // without unk_id meeting an unknown character); WordPiece and BPE always
  // succeed.
  virtual absl::Status Tokenize(absl::string_view word,
                                std::vector<int64_t>* ids) const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_MODEL_H_
