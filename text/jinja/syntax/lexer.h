// Splits a template's source into tokens as jinja2's lexer does under
// transformers' settings: trim_blocks and lstrip_blocks on,
// keep_trailing_newline off (one final newline dropped), "\r\n" and "\r"
// read as "\n", `-` and `+` whitespace control on every tag. Comments are
// dropped here; `{% raw %}` and line statements are not supported (an error
// naming them).
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_SYNTAX_LEXER_H_
#define CASTSERVE_TEXT_JINJA_SYNTAX_LEXER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text::jinja {

struct Token {
  enum class Kind {
    kData,           // Text outside tags (value: the text).
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,           // Identifiers and keywords.
    kString,         // Value: the decoded literal.
    kInteger,        // Value: the digits, underscores removed.
    kFloat,          // Value: the literal, underscores removed.
    kOperator,       // Value: "+", "//", "==", "(", ...
    kEnd,            // End of the template.
  };
  Kind kind;
  std::string value;
  int line;    // 1-based, in the source after newline normalisation.
  int column;  // 1-based, in bytes.
};

// "line 3, column 7".
std::string PositionText(int line, int column);

// InvalidArgument on an unterminated tag or string, an unexpected
// character or closing bracket, or an unsupported construct, naming it and
// its position.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

// Python's str.isspace() for one code point (str.strip()'s default set).
bool IsPythonSpace(char32_t c);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_SYNTAX_LEXER_H_
