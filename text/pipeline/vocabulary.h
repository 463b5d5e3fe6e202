// A model's token <-> id table.
//
// Immutable after Create; thread-safe.
#ifndef CASTSERVE_TEXT_PIPELINE_VOCABULARY_H_
#define CASTSERVE_TEXT_PIPELINE_VOCABULARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text {

class Vocabulary {
 public:
  // Ids above this are refused: the id -> token table is dense.
  static constexpr int64_t kMaxId = int64_t{1} << 24;
  // The table has one slot per id up to the largest, so ids may leave at
  // most this many slots empty: its size stays proportional to the file.
  static constexpr int64_t kMaxUnusedIds = int64_t{1} << 16;

  // InvalidArgument naming `path` for an id above kMaxId, ids so sparse
  // that more than kMaxUnusedIds of the table would be empty, or a token
  // listed twice.
  static absl::StatusOr<Vocabulary> Create(
      const std::vector<std::pair<std::string, int64_t>>& entries,
      absl::string_view path);

  std::optional<int64_t> Find(absl::string_view token) const {
    auto it = ids_.find(absl::string_view(token.data(), token.size()));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // The token of `id`; null when no token has it.
  const std::string* Token(int64_t id) const {
    if (id < 0 || id >= static_cast<int64_t>(tokens_.size()) ||
        !has_token_[id]) {
      return nullptr;
    }
    return &tokens_[id];
  }
  int64_t size() const {
    return static_cast<int64_t>(tokens_.size());
  }  // largest id + 1

 private:
  absl::flat_hash_map<std::string, int64_t> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_VOCABULARY_H_
