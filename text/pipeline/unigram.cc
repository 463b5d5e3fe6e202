#include "text/pipeline/unigram.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

// The score of an unknown character: this much below the lowest piece's.
constexpr double kUnknownPenalty = 10.0;

}  // namespace

Unigram::Unigram(Vocabulary vocabulary, std::vector<double> scores,
                 std::optional<int64_t> unk_id, bool byte_fallback)
    : vocabulary_(std::move(vocabulary)),
      scores_(std::move(scores)),
      unk_id_(unk_id),
      byte_fallback_(byte_fallback) {}

absl::StatusOr<std::unique_ptr<Unigram>> Unigram::Create(
    const ModelSpec& spec) {
  if (spec.vocab.empty()) {
    return absl::InvalidArgumentError("model.vocab: empty");
  }
  if (spec.unk_id.has_value() &&
      *spec.unk_id >= static_cast<int64_t>(spec.vocab.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.unk_id: ", *spec.unk_id, " is outside the ",
                     spec.vocab.size(), " tokens of the vocabulary"));
  }
  double lowest = std::numeric_limits<double>::infinity();
  for (size_t id = 0; id < spec.scores.size(); ++id) {
    if (!std::isfinite(spec.scores[id])) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab[", id, "]: the score is not finite"));
    }
    lowest = std::min(lowest, spec.scores[id]);
  }
  absl::StatusOr<Vocabulary> vocabulary =
      Vocabulary::Create(spec.vocab, "model.vocab");
  if (!vocabulary.ok()) return vocabulary.status();
  std::unique_ptr<Unigram> unigram(new Unigram(
      *std::move(vocabulary), spec.scores, spec.unk_id, spec.byte_fallback));
  unigram->unknown_score_ = lowest - kUnknownPenalty;
  unigram->BuildTrie();
  return unigram;
}

// Breadth first over the pieces sorted by their bytes: the pieces under a
// node share its prefix and form one contiguous range, and its children are
// that range cut by the next byte.
void Unigram::BuildTrie() {
  std::vector<std::pair<absl::string_view, int32_t>> pieces;
  pieces.reserve(scores_.size());
  for (int64_t id = 0; id < static_cast<int64_t>(scores_.size()); ++id) {
    const std::string* token = vocabulary_.Token(id);
    if (!token->empty()) pieces.emplace_back(*token, static_cast<int32_t>(id));
  }
  std::sort(pieces.begin(), pieces.end());
  struct Range {
    int32_t node;
    size_t begin, end, depth;
  };
  trie_.assign(1, TrieNode{});
  std::deque<Range> pending{{0, 0, pieces.size(), 0}};
  while (!pending.empty()) {
    Range range = pending.front();
    pending.pop_front();
    if (range.begin < range.end &&
        pieces[range.begin].first.size() == range.depth) {
      trie_[range.node].piece_id = pieces[range.begin].second;
      ++range.begin;  // sorted: the piece that ends here comes first
    }
    trie_[range.node].first_child = static_cast<int32_t>(trie_.size());
    for (size_t begin = range.begin; begin < range.end;) {
      const unsigned char label =
          static_cast<unsigned char>(pieces[begin].first[range.depth]);
      size_t end = begin + 1;
      while (end < range.end && static_cast<unsigned char>(
                                    pieces[end].first[range.depth]) == label) {
        ++end;
      }
      TrieNode child;
      child.label = label;
      pending.push_back(
          {static_cast<int32_t>(trie_.size()), begin, end, range.depth + 1});
      trie_.push_back(child);
      ++trie_[range.node].child_count;
      begin = end;
    }
  }
}

const Unigram::TrieNode* Unigram::FindChild(const TrieNode& node,
                                            unsigned char label) const {
  const TrieNode* first = trie_.data() + node.first_child;
  const TrieNode* last = first + node.child_count;
  const TrieNode* found = std::lower_bound(
      first, last, label, [](const TrieNode& child, unsigned char value) {
        return child.label < value;
      });
  return found != last && found->label == label ? found : nullptr;
}

// best[i]: the best segmentation of word[0, i). Starts are visited in
// order and a later candidate must score strictly higher, as in the library.
absl::StatusOr<std::vector<Unigram::BestPath>> Unigram::Viterbi(
    absl::string_view word) const {
  std::vector<BestPath> best(word.size() + 1);
  best[0].begin = 0;
  auto offer = [&](size_t begin, size_t end, double score, int64_t id) {
    const double candidate = best[begin].score + score;
    BestPath& target = best[end];
    if (target.begin < 0 || candidate > target.score) {
      target = BestPath{candidate, id, static_cast<int64_t>(begin)};
    }
  };
  for (size_t begin = 0; begin < word.size();) {
    const size_t char_length =
        Utf8Length(static_cast<unsigned char>(word[begin]));
    bool covers_character = false;
    const TrieNode* node = trie_.data();
    for (size_t end = begin; end < word.size();) {
      node = FindChild(*node, static_cast<unsigned char>(word[end]));
      if (node == nullptr) break;
      ++end;
      if (node->piece_id < 0) continue;
      offer(begin, end, scores_[node->piece_id], node->piece_id);
      covers_character |= end - begin == char_length;
    }
    if (!covers_character) {
      const size_t end = begin + char_length;
      const BestPath& target = best[end];
      const bool better =
          target.begin < 0 || best[begin].score + unknown_score_ > target.score;
      if (better && !unk_id_.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the tokenizer's Unigram model has no unk_id for the character "
            "at byte ",
            begin, " of a word"));
      }
      if (better) offer(begin, end, unknown_score_, *unk_id_);
    }
    begin += char_length;
  }
  return best;
}

void Unigram::AppendPiece(absl::string_view piece,
                          std::vector<int64_t>* ids) const {
  if (std::optional<int64_t> id = vocabulary_.Find(piece)) {
    ids->push_back(*id);
    return;
  }
  if (byte_fallback_) {
    const size_t first_new = ids->size();
    for (const char byte : piece) {
      std::optional<int64_t> byte_id = vocabulary_.Find(
          absl::StrFormat("<0x%02X>", static_cast<unsigned char>(byte)));
      if (!byte_id.has_value()) {
        ids->resize(first_new);
        break;
      }
      ids->push_back(*byte_id);
    }
    if (ids->size() > first_new) return;
  }
  // Only runs of unknowns are missing from the vocabulary, and Viterbi made
  // those with the unk_id.
  ids->push_back(*unk_id_);
}

absl::Status Unigram::Tokenize(absl::string_view word,
                               std::vector<int64_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<BestPath>> best = Viterbi(word);
  if (!best.ok()) return best.status();
  struct Step {
    size_t begin, end;
    int64_t id;
    bool unknown;
  };
  std::vector<Step> path;  // from the word's end
  for (size_t end = word.size(); end > 0; end = path.back().begin) {
    const BestPath& step = (*best)[end];
    path.push_back({static_cast<size_t>(step.begin), end, step.id,
                    unk_id_.has_value() && step.id == *unk_id_});
  }
  std::reverse(path.begin(), path.end());
  for (size_t i = 0; i < path.size();) {
    if (!path[i].unknown) {
      ids->push_back(path[i].id);
      ++i;
      continue;
    }
    size_t last = i;  // adjacent unknowns fuse into one piece
    while (last + 1 < path.size() && path[last + 1].unknown) ++last;
    AppendPiece(word.substr(path[i].begin, path[last].end - path[i].begin),
                ids);
    i = last + 1;
  }
  return absl::OkStatus();
}

}  // namespace castserve::text
