#include "text/pipeline/vocabulary.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text {

absl::StatusOr<Vocabulary> Vocabulary::Create(
    const std::vector<std::pair<std::string, int64_t>>& entries,
    absl::string_view path) {
  Vocabulary vocabulary;
  vocabulary.ids_.reserve(entries.size());
  int64_t largest = -1;
  for (const auto& [token, id] : entries) {
    if (id < 0 || id > kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, "[\"", token, "\"]: id ", id, " is outside [0, ", kMaxId, "]"));
    }
    if (!vocabulary.ids_.emplace(token, id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token \"", token, "\" is listed twice"));
    }
    largest = std::max(largest, id);
  }
  const int64_t unused = largest + 1 - static_cast<int64_t>(entries.size());
  if (unused > kMaxUnusedIds) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the largest id is ", largest, " for ",
                     entries.size(), " tokens; ids leaving more than ",
                     kMaxUnusedIds, " unused are refused"));
  }
  vocabulary.tokens_.resize(largest + 1);
  vocabulary.has_token_.resize(largest + 1, false);
  for (const auto& [token, id] : entries) {
    vocabulary.tokens_[id] = token;
    vocabulary.has_token_[id] = true;
  }
  return vocabulary;
}

}  // namespace castserve::text
