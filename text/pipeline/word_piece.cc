#include "text/pipeline/word_piece.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {

WordPiece::WordPiece(Vocabulary vocabulary, int64_t unk_id, std::string prefix,
                     int64_t max_input_chars_per_word)
    : vocabulary_(std::move(vocabulary)),
      unk_id_(unk_id),
      prefix_(std::move(prefix)),
      max_input_chars_per_word_(max_input_chars_per_word) {}

absl::StatusOr<std::unique_ptr<WordPiece>> WordPiece::Create(
    const ModelSpec& spec) {
  absl::StatusOr<Vocabulary> vocabulary =
      Vocabulary::Create(spec.vocab, "model.vocab");
  if (!vocabulary.ok()) return vocabulary.status();
  const std::string unk_token = spec.unk_token.value_or("[UNK]");
  const std::optional<int64_t> unk_id = vocabulary->Find(unk_token);
  if (!unk_id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.unk_token: \"", unk_token, "\" is not in the vocabulary"));
  }
  return std::unique_ptr<WordPiece>(
      new WordPiece(*std::move(vocabulary), *unk_id,
                    spec.continuing_subword_prefix.value_or("##"),
                    spec.max_input_chars_per_word));
}

absl::Status WordPiece::Tokenize(absl::string_view word,
                                 std::vector<int64_t>* ids) const {
  if (static_cast<int64_t>(CodePointCount(word)) > max_input_chars_per_word_) {
    ids->push_back(unk_id_);
    return absl::OkStatus();
  }
  const size_t first_new = ids->size();
  std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    std::optional<int64_t> found;
    while (end > start) {
      candidate.clear();
      if (start > 0) absl::StrAppend(&candidate, prefix_);
      absl::StrAppend(&candidate, word.substr(start, end - start));
      found = vocabulary_.Find(candidate);
      if (found.has_value()) break;
      --end;  // back to the previous character boundary
      while (end > start &&
             (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80)
        --end;
    }
    if (!found.has_value()) {
      ids->resize(first_new);
      ids->push_back(unk_id_);
      return absl::OkStatus();
    }
    ids->push_back(*found);
    start = end;
  }
  return absl::OkStatus();
}

}  // namespace castserve::text
