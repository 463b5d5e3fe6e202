// Python's str operations on UTF-8 text, as chat templates call them:
// code-point indexing, strip/split/replace/startswith, and the Unicode case
// mappings (ICU's full mappings, root locale, as Python's upper() and
// lower(); title() and capitalize() by code point with ICU's simple title
// mapping). Inputs are valid UTF-8.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_PYTHON_STRING_H_
#define CASTSERVE_TEXT_JINJA_PYTHON_STRING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::text::jinja {

std::u32string ToCodePoints(absl::string_view text);
std::string FromCodePoints(const std::u32string& code_points);

enum class StripSide { kBoth, kLeft, kRight };
// str.strip(chars): `chars` absent strips Python whitespace.
std::string PythonStrip(absl::string_view text,
                        const std::optional<std::string>& chars,
                        StripSide side);
// str.split(sep, maxsplit) (maxsplit < 0: all). An empty `sep` is an
// error, as in Python.
absl::StatusOr<std::vector<std::string>> PythonSplit(
    absl::string_view text, const std::optional<std::string>& sep,
    int64_t maxsplit);
// How many parts PythonSplit (or PythonRSplit) makes, found without
// building them.
size_t PythonSplitCount(absl::string_view text,
                        const std::optional<std::string>& sep,
                        int64_t maxsplit);
// str.rsplit(sep, maxsplit).
absl::StatusOr<std::vector<std::string>> PythonRSplit(
    absl::string_view text, const std::optional<std::string>& sep,
    int64_t maxsplit);
// How many replacements PythonReplace makes, found without making them.
size_t PythonReplaceCount(absl::string_view text, absl::string_view old_text,
                          int64_t count);
// str.replace(old, new, count) (count < 0: all).
std::string PythonReplace(absl::string_view text, absl::string_view old_text,
                          absl::string_view new_text, int64_t count);
std::string PythonUpper(absl::string_view text);
std::string PythonLower(absl::string_view text);
std::string PythonTitle(absl::string_view text);
std::string PythonCapitalize(absl::string_view text);
// jinja2's title filter: each word (split at whitespace, "-", "(", "{",
// "[", "<") gets its first character upper-cased and the rest lowered.
std::string JinjaTitle(absl::string_view text);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_PYTHON_STRING_H_
