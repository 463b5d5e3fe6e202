// Parses a chat template's tokens (lexer.h) into a Program (ast.h), with
// jinja2's grammar and operator precedence. What castserve does not
// implement is refused here, naming the construct and its position:
// statements (include, import, extends, block, call, filter, with, do,
// raw, recursive loops), filters and tests outside the supported set,
// methods no supported type has, *args and **kwargs.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_H_
#define CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "text/jinja/syntax/ast.h"
#include "text/jinja/syntax/lexer.h"

namespace castserve::text::jinja {

// InvalidArgument for syntax errors and unsupported constructs;
// ResourceExhausted when statements or expressions nest deeper than
// `max_nesting_depth`.
absl::StatusOr<std::unique_ptr<Program>> Parse(const std::vector<Token>& tokens,
                                               int max_nesting_depth);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_SYNTAX_PARSER_H_
