// The "pattern" of tokenizer.json's Split pre-tokenizer and Replace
// normalizer: a literal string or a regular expression in the Oniguruma
// dialect the `tokenizers` library compiles, run here through RE2.
//
// The Oniguruma constructs these files use and RE2 reads differently are
// rewritten before RE2 compiles the pattern: \s \S \d \D \w \W become their
// Unicode classes (RE2's are ASCII-only). RE2 has no lookaround; the one
// lookahead tokenizer.json files carry, the GPT-2 / Llama 3 / Qwen2 ending
// `\s+(?!\S)|\s+`, is emulated: it becomes a capture group `(\s+)`, and a
// match of that group that is followed by more text (necessarily non-space:
// the run is greedy) and is longer than one character gives back its last
// character, which is exactly what the backtracking lookahead does (the run
// minus its last character is followed by a space; a single character falls
// to the second `\s+`). The next search starts at that character, where
// earlier alternatives (" ?\p{L}+" and the like) take it. Any other
// lookaround, atomic group or construct RE2 rejects is InvalidArgument
// naming the pattern.
//
// Immutable after Create; FindMatches is thread-safe.
#ifndef CASTSERVE_TEXT_UNICODE_SPLIT_PATTERN_H_
#define CASTSERVE_TEXT_UNICODE_SPLIT_PATTERN_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace re2 {
class RE2;
}

namespace castserve::text {

struct PatternSpec {
  bool is_regex = false;  // {"Regex": ...} rather than {"String": ...}
  std::string text;
};

class SplitPattern {
 public:
  // Byte offsets [begin, end) of one match in the searched text.
  using Span = std::pair<size_t, size_t>;

  static absl::StatusOr<std::unique_ptr<SplitPattern>> Create(
      const PatternSpec& spec);
  ~SplitPattern();

  // The non-overlapping, non-empty matches in `text` (valid UTF-8), left to
  // right, as the `tokenizers` library finds them.
  std::vector<Span> FindMatches(absl::string_view text) const;

  // `text` cut into consecutive spans covering all of it, each flagged as a
  // match or not (the input of Split's behaviours). Empty text gives one
  // empty non-match.
  std::vector<std::pair<Span, bool>> Partition(absl::string_view text) const;

 private:
  SplitPattern(PatternSpec spec, std::unique_ptr<re2::RE2> regex,
               int lookahead_group);
  std::vector<Span> FindLiteral(absl::string_view text) const;
  std::vector<Span> FindRegex(absl::string_view text) const;
  // The end of the match [begin, end), which more text follows, once the
  // emulated lookahead has given back what it gives back.
  size_t LookaheadEnd(absl::string_view text, size_t begin, size_t end) const;

  const PatternSpec spec_;
  const std::unique_ptr<re2::RE2> regex_;  // null for a literal pattern
  // The capture group standing for `\s+(?!\S)|\s+`; 0 when absent.
  const int lookahead_group_;
};

// Rewrites an Oniguruma pattern for RE2 as described above; sets
// *lookahead_group to the emulated group's number (0 when the pattern has
// none). InvalidArgument naming the pattern for what cannot be rewritten.
absl::StatusOr<std::string> TranslateOnigurumaPattern(absl::string_view pattern,
                                                      int* lookahead_group);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_UNICODE_SPLIT_PATTERN_H_
