// Byte-pair encoding as the `tokenizers` library runs it (byte-level BPE as
// Llama 3 and Qwen2 declare it, and the classic kind): a word starts as its
// characters (each a token; an unknown one becomes the unknown token, its
// bytes' <0xXX> tokens with byte_fallback, or nothing), then the adjacent
// pair with the best (lowest) merge rank is merged, leftmost first among
// equal ranks, until no pair has a merge. With ignore_merges, a word that is
// itself a token is that token.
#ifndef CASTSERVE_TEXT_PIPELINE_BPE_H_
#define CASTSERVE_TEXT_PIPELINE_BPE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "text/pipeline/model.h"
#include "text/pipeline/tokenizer_json.h"

namespace castserve::text {

class Bpe : public Model {
 public:
  // InvalidArgument naming the field: a merge whose parts or result are not
  // in the vocabulary ("model.merges[3]"), an unknown token missing from it.
  static absl::StatusOr<std::unique_ptr<Bpe>> Create(const ModelSpec& spec);

  absl::Status Tokenize(absl::string_view word,
                        std::vector<int64_t>* ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t previous;  // index, -1 at the start
    int32_t next;      // index, -1 at the end
    bool removed;
  };
  Bpe(const ModelSpec& spec, Vocabulary vocabulary,
      std::optional<int64_t> unk_id);
  absl::Status AddMerges(const ModelSpec& spec);
  std::vector<Symbol> InitialSymbols(absl::string_view word) const;
  void MergeAll(std::vector<Symbol>* symbols) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  const Vocabulary vocabulary_;
  const std::optional<int64_t> unk_id_;
  const std::string prefix_;  // continuing_subword_prefix
  const std::string suffix_;  // end_of_word_suffix
  const bool fuse_unk_;
  const bool byte_fallback_;
  const bool ignore_merges_;
  // (left id << 32 | right id) -> merge
  absl::flat_hash_map<uint64_t, Merge> merges_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_BPE_H_
