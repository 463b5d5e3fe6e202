// Unigram (SentencePiece's unigram language model) as the `tokenizers`
// library runs it: a word becomes the segmentation into vocabulary pieces
// whose scores sum highest (Viterbi over byte positions; on equal sums the
// path found first wins: the last piece starting earliest). A character no
// single-character piece covers may become the unknown token, scored as the
// lowest score minus 10; adjacent unknown characters fuse into one unknown
// token. With byte_fallback, an unknown run becomes the <0xXX> pieces of its
// bytes instead when the vocabulary has all of them.
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_UNIGRAM_H_
#define CASTSERVE_TEXT_PIPELINE_UNIGRAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "text/pipeline/model.h"
#include "text/pipeline/tokenizer_json.h"

namespace castserve::text {

class Unigram : public Model {
 public:
  // InvalidArgument naming the field: an empty vocabulary, a token listed
  // twice, an unk_id outside it, a score that is not finite.
  static absl::StatusOr<std::unique_ptr<Unigram>> Create(const ModelSpec& spec);

  // InvalidArgument when `word` has a character the vocabulary cannot cover
  // and the model has no unk_id (as the library's MissingUnkId).
  absl::Status Tokenize(absl::string_view word,
                        std::vector<int64_t>* ids) const override;
  const Vocabulary& vocabulary() const override { return vocabulary_; }

 private:
  // A byte trie over the pieces, children of a node contiguous and sorted
  // by label.
  struct TrieNode {
    int32_t first_child = 0;
    int32_t child_count = 0;
    int32_t piece_id = -1;  // the piece that ends here
    unsigned char label = 0;
  };
  // The best segmentation of word[0, position) found so far.
  struct BestPath {
    double score = 0;
    int64_t id = 0;
    int64_t begin = -1;  // the last piece's start; -1: not reached
  };

  Unigram(Vocabulary vocabulary, std::vector<double> scores,
          std::optional<int64_t> unk_id, bool byte_fallback);
  void BuildTrie();
  const TrieNode* FindChild(const TrieNode& node, unsigned char label) const;
  absl::StatusOr<std::vector<BestPath>> Viterbi(absl::string_view word) const;
  // Appends the id of `piece` (one path step, or fused unknowns).
  void AppendPiece(absl::string_view piece, std::vector<int64_t>* ids) const;

  const Vocabulary vocabulary_;
  const std::vector<double> scores_;  // by id
  const std::optional<int64_t> unk_id_;
  const bool byte_fallback_;
  double unknown_score_ = 0;
  std::vector<TrieNode> trie_;  // [0] is the root
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_UNIGRAM_H_
