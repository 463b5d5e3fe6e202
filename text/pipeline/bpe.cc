#include "text/pipeline/bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace castserve::text {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

// A merge candidate: the pair starting at symbol `position`.
struct Candidate {
  int32_t rank;
  int32_t position;
  int32_t new_id;
  // std::priority_queue pops the largest: make that the lowest rank, then
  // the leftmost position.
  bool operator<(const Candidate& other) const {
    if (rank != other.rank) return rank > other.rank;
    return position > other.position;
  }
};

}  // namespace

Bpe::Bpe(const ModelSpec& spec, Vocabulary vocabulary,
         std::optional<int64_t> unk_id)
    : vocabulary_(std::move(vocabulary)),
      unk_id_(unk_id),
      prefix_(spec.continuing_subword_prefix.value_or("")),
      suffix_(spec.end_of_word_suffix.value_or("")),
      fuse_unk_(spec.fuse_unk),
      byte_fallback_(spec.byte_fallback),
      ignore_merges_(spec.ignore_merges) {}

absl::StatusOr<std::unique_ptr<Bpe>> Bpe::Create(const ModelSpec& spec) {
  absl::StatusOr<Vocabulary> vocabulary =
      Vocabulary::Create(spec.vocab, "model.vocab");
  if (!vocabulary.ok()) return vocabulary.status();
  std::optional<int64_t> unk_id;
  if (spec.unk_token.has_value()) {
    unk_id = vocabulary->Find(*spec.unk_token);
    if (!unk_id.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.unk_token: \"", *spec.unk_token,
                       "\" is not in the vocabulary"));
    }
  }
  std::unique_ptr<Bpe> bpe(new Bpe(spec, *std::move(vocabulary), unk_id));
  if (absl::Status status = bpe->AddMerges(spec); !status.ok()) return status;
  return bpe;
}

absl::Status Bpe::AddMerges(const ModelSpec& spec) {
  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const std::optional<int64_t> left_id = vocabulary_.Find(left);
    const std::optional<int64_t> right_id = vocabulary_.Find(right);
    const absl::string_view right_body =
        absl::string_view(right).substr(std::min(prefix_.size(), right.size()));
    const std::optional<int64_t> new_id =
        vocabulary_.Find(absl::StrCat(left, right_body));
    if (!left_id.has_value() || !right_id.has_value() || !new_id.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.merges[", rank, "]: \"", left, " ", right, "\": ",
                       !left_id.has_value()    ? left
                       : !right_id.has_value() ? right
                                               : absl::StrCat(left, right_body),
                       " is not in the vocabulary"));
    }
    // A pair listed twice keeps its last rank, as in the library's map.
    merges_.insert_or_assign(
        PairKey(*left_id, *right_id),
        Merge{static_cast<int32_t>(rank), static_cast<int32_t>(*new_id)});
  }
  return absl::OkStatus();
}

const Bpe::Merge* Bpe::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<Bpe::Symbol> Bpe::InitialSymbols(absl::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int64_t id) {
    symbols.push_back(Symbol{static_cast<int32_t>(id), -1, -1, false});
  };
  std::optional<int64_t> pending_unk;  // with fuse_unk, unknowns run together
  std::string piece;
  for (size_t begin = 0; begin < word.size();) {
    size_t end = begin + 1;
    while (end < word.size() &&
           (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80)
      ++end;
    piece.clear();
    if (begin > 0) absl::StrAppend(&piece, prefix_);
    absl::StrAppend(&piece, word.substr(begin, end - begin));
    if (end == word.size()) absl::StrAppend(&piece, suffix_);
    const std::optional<int64_t> id = vocabulary_.Find(piece);
    const absl::string_view bytes = word.substr(begin, end - begin);
    begin = end;
    if (id.has_value()) {
      if (pending_unk.has_value())
        add(*std::exchange(pending_unk, std::nullopt));
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> byte_ids;
      for (unsigned char byte : bytes) {
        std::optional<int64_t> byte_id = vocabulary_.Find(
            absl::StrFormat("<0x%02X>", static_cast<int>(byte)));
        if (!byte_id.has_value()) break;
        byte_ids.push_back(*byte_id);
      }
      if (byte_ids.size() == bytes.size()) {
        if (pending_unk.has_value())
          add(*std::exchange(pending_unk, std::nullopt));
        for (int64_t byte_id : byte_ids) add(byte_id);
        continue;
      }
    }
    if (!unk_id_.has_value()) continue;  // the library drops the character
    if (pending_unk.has_value() && !fuse_unk_) add(*pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk.has_value()) add(*pending_unk);
  for (size_t i = 0; i < symbols.size(); ++i) {
    symbols[i].previous = static_cast<int32_t>(i) - 1;
    symbols[i].next = i + 1 < symbols.size() ? static_cast<int32_t>(i + 1) : -1;
  }
  return symbols;
}

void Bpe::MergeAll(std::vector<Symbol>* symbols_pointer) const {
  std::vector<Symbol>& symbols = *symbols_pointer;
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t position) {
    const int32_t next = symbols[position].next;
    if (next < 0) return;
    if (const Merge* merge =
            FindMerge(symbols[position].id, symbols[next].id)) {
      queue.push(Candidate{merge->rank, position, merge->new_id});
    }
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    consider(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const Merge* merge = FindMerge(left.id, right.id);
    if (merge == nullptr || merge->new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = top.position;
    if (left.previous >= 0) consider(left.previous);
    consider(top.position);
  }
}

absl::Status Bpe::Tokenize(absl::string_view word,
                           std::vector<int64_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (std::optional<int64_t> id = vocabulary_.Find(word)) {
      ids->push_back(*id);
      return absl::OkStatus();
    }
  }
  std::vector<Symbol> symbols = InitialSymbols(word);
  MergeAll(&symbols);
  for (const Symbol& symbol : symbols) {
    if (!symbol.removed) ids->push_back(symbol.id);
  }
  return absl::OkStatus();
}

}  // namespace castserve::text
