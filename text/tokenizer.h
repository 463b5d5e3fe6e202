// The text-to-token-ids interface castserve's models use, and the loader that
// picks an implementation from a model folder.
//
// Implementations: a tokenizer.json pipeline (json_tokenizer.h: WordPiece as
// BERT declares it, byte-level BPE as Llama 3 and Qwen2 declare it, Unigram
// with SentencePiece's charsmap as XLM-RoBERTa declares it) and a
// SentencePiece tokenizer.model (sentencepiece_tokenizer.h). Token ids equal
// those of Hugging Face's `tokenizers` (resp. `sentencepiece`) Python library
// for the same file; text/testdata holds the references the tests compare.
#ifndef CASTSERVE_TEXT_TOKENIZER_H_
#define CASTSERVE_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace castserve::text {

struct Encoding {
  std::vector<int64_t>
      ids;  // including the special tokens the post-processor adds
  std::vector<int64_t>
      type_ids;  // token_type_ids, same length (0s for one sequence)
};

struct EncodeOptions {
  bool add_special_tokens = true;
  // Most tokens in the result, special tokens included; 0: no limit. Longer
  // texts lose tokens at the end, before the special tokens are added
  // (like tokenizers' truncation, strategy longest_first, direction right).
  // The "truncation" and "padding" sections of a tokenizer.json are not
  // applied: the caller decides both.
  int64_t max_length = 0;
};

// Immutable after loading; every method is thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // InvalidArgument for text that is not valid UTF-8.
  virtual absl::StatusOr<Encoding> Encode(
      std::string_view text, const EncodeOptions& options) const = 0;
  // The encoding of the pair (`first`, `second`) as the tokenizer's pair
  // template lays it out (a cross-encoder's query and document). With
  // max_length, tokens go from the end of the longer text first, as
  // tokenizers' longest_first truncation does. InvalidArgument naming the
  // text that is not valid UTF-8; FailedPrecondition when the tokenizer
  // has no pair template (this default: SentencePiece tokenizer.model).
  virtual absl::StatusOr<Encoding> EncodePair(
      std::string_view first, std::string_view second,
      const EncodeOptions& options) const;
  // The text of `ids` as the file's decoder writes it. InvalidArgument for an
  // id the vocabulary does not have.
  virtual absl::StatusOr<std::string> Decode(
      absl::Span<const int64_t> ids, bool skip_special_tokens) const = 0;
  virtual int64_t vocab_size() const = 0;  // largest id + 1
  virtual std::optional<int64_t> TokenToId(std::string_view token) const = 0;
  // The id padding uses (tokenizer.json's "padding.pad_id", else the "[PAD]"/
  // "<pad>" token); nullopt when the tokenizer names none.
  virtual std::optional<int64_t> pad_id() const = 0;
};

inline absl::StatusOr<Encoding> Tokenizer::EncodePair(
    std::string_view, std::string_view, const EncodeOptions&) const {
  return absl::FailedPreconditionError(
      "the tokenizer has no pair template (a SentencePiece tokenizer.model "
      "encodes single texts only)");
}

// The folder's tokenizer: tokenizer.json when present, else a SentencePiece
// tokenizer.model. NotFound when it has neither; InvalidArgument naming the
// file and the offending field for a malformed or unsupported one.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& folder);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_TOKENIZER_H_
