// Reading the parity corpus and references that
// tools/gen_tokenizer_references.py writes under text/testdata/references.
#ifndef CASTSERVE_TEXT_TEST_UTIL_REFERENCE_CORPUS_H_
#define CASTSERVE_TEXT_TEST_UTIL_REFERENCE_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace castserve::text {

inline constexpr char kReferencesFolder[] = "text/testdata/references/";

// The lines of `path` (without the '\n'); empty when it cannot be read.
std::vector<std::string> ReadLines(const std::string& path);

// Undoes the generator's escaping ("\\" and "\xHH").
std::string Unescape(absl::string_view line);

// references/corpus.txt, unescaped.
std::vector<std::string> ReadCorpus();

// references/<name>.ids: per line, space-separated ids.
std::vector<std::vector<int64_t>> ReadReferenceIds(const std::string& name);

// Space-separated ids (one line of a .ids file).
std::vector<int64_t> ParseIds(absl::string_view line);

// The lines of an .ids file at `path`.
std::vector<std::vector<int64_t>> ReadIdsFile(const std::string& path);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_TEST_UTIL_REFERENCE_CORPUS_H_
