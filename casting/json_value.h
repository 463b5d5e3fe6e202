#ifndef CASTSERVE_CASTING_JSON_VALUE_H_
#define CASTSERVE_CASTING_JSON_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::casting {

// A parsed JSON document, just enough for checkpoint headers and indexes.
// Numbers keep their literal text; `AsUint64` converts on demand, so large
// integers are never rounded through a double.
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // kString: decoded UTF-8; kNumber: the literal.
  std::vector<JsonValue> items;                            // kArray.
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject.

  // The value of a non-negative integer literal, or an error.
  absl::StatusOr<uint64_t> AsUint64() const;
  // nullptr if this is not an object or has no such key.
  const JsonValue* Member(absl::string_view key) const;
};

absl::string_view JsonKindName(JsonValue::Kind kind);

// Strict RFC 8259 parse of a whole document: one value, optional surrounding
// whitespace, nesting at most `max_depth`, duplicate object keys rejected.
// Errors say what was expected and at which byte offset.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth = 64);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_JSON_VALUE_H_
