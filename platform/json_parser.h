// castserve's one way into JSON: strict, bounded parsing into nlohmann/json
// (nlohmann-json3-dev 3.11.2, //third_party:json) with errors as
// absl::Status. Writing is nlohmann::json::dump() (see the README).
//
// The library's own parser reads the text (RFC 8259, UTF-8 checked, no
// comments, one value and nothing after it) and calls back into a document
// builder here that refuses nesting deeper than `max_depth` before building
// it and refuses a repeated key in one object (the library alone would keep
// the last). No exception leaves ParseJson: the parser reports errors through
// its SAX interface, which is what this builder implements. Object members
// come back ordered by key (nlohmann::json's std::map), not in text order.
//
// Stateless; safe to call from any thread.
#ifndef CASTSERVE_PLATFORM_JSON_PARSER_H_
#define CASTSERVE_PLATFORM_JSON_PARSER_H_

#include <cstddef>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::platform {

struct JsonLimits {
  // Containers (objects, arrays) open at once: "[[1]]" has depth 2.
  int max_depth = 64;
  // The longest text accepted; longer text is refused unread.
  size_t max_bytes = size_t{100} * 1000 * 1000;
};

// Parses one whole JSON document. InvalidArgument on any error, the message
// saying what and, for syntax errors, at which byte (0-based): "invalid JSON
// at byte 16: syntax error while parsing value - unexpected '}'; ...",
// "invalid JSON: nesting deeper than 64", "invalid JSON: duplicate key
// \"a\"". Messages are at most a few hundred bytes whatever the input.
absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text,
                                         const JsonLimits& limits = {});

// "null", "a boolean", "a number", "a string", "an array" or "an object":
// for messages such as "\"shape\" must be an array, got a string".
absl::string_view JsonTypeName(const nlohmann::json& value);

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_JSON_PARSER_H_
