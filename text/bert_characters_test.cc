// BertNormalizer and BertPreTokenizer on every code point alone, against
// the tokenizers library's answers (references/bert_characters.txt).
#include <unicode/uchar.h>

#include <iostream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "text/pipeline/normalizer.h"
#include "text/pipeline/pre_tokenizer.h"
#include "text/test_util/reference_corpus.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

struct Expected {
  std::string kind;  // word, space, punct, other
  std::string normalized;
};

// The file's runs (see tools/gen_tokenizer_references.py), expanded.
absl::flat_hash_map<char32_t, Expected> ReadExpected() {
  absl::flat_hash_map<char32_t, Expected> expected;
  for (const std::string& line :
       ReadLines(absl::StrCat(kReferencesFolder, "bert_characters.txt"))) {
    const std::vector<std::string> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint32_t first = 0;
    uint32_t last = 0;
    EXPECT_EQ(fields.size(), 4u) << line;
    EXPECT_TRUE(absl::SimpleHexAtoi(fields[0], &first)) << line;
    EXPECT_TRUE(absl::SimpleHexAtoi(fields[1], &last)) << line;
    for (char32_t c = first; c <= last; ++c) {
      std::string character;
      AppendUtf8(c, &character);
      Expected entry{fields[2], ""};
      const std::string& result = fields[3];
      if (result == "=") {
        entry.normalized = character;
      } else if (result == "c") {
        entry.normalized = absl::StrCat(" ", character, " ");
      } else if (result != "-") {
        for (absl::string_view hex : absl::StrSplit(result, ',')) {
          uint32_t code = 0;
          EXPECT_TRUE(absl::SimpleHexAtoi(hex, &code)) << line;
          AppendUtf8(code, &entry.normalized);
        }
      }
      expected[c] = entry;
    }
  }
  return expected;
}

std::string Kind(const PreTokenizer& pre_tokenizer,
                 const std::string& character) {
  std::vector<std::string> words;
  pre_tokenizer.PreTokenize("a" + character + "a", &words);
  if (words.size() == 1) return "word";
  if (words.size() == 2) return "space";
  return words.size() == 3 && words[1] == character ? "punct" : "other";
}

TEST(BertCharactersTest, EveryCodePointAsTheTokenizersLibrary) {
  const absl::flat_hash_map<char32_t, Expected> expected = ReadExpected();
  ASSERT_GT(expected.size(), 1000u);
  NormalizerSpec spec;
  spec.type = NormalizerSpec::Type::kBert;
  PreTokenizerSpec pre_spec;
  pre_spec.type = PreTokenizerSpec::Type::kBert;
  std::unique_ptr<PreTokenizer> pre_tokenizer =
      PreTokenizer::Create(pre_spec).value();
  int equal = 0;
  int not_compared = 0;
  int different = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string character;
    AppendUtf8(c, &character);
    auto it = expected.find(c);
    const Expected want =
        it == expected.end() ? Expected{"word", character} : it->second;
    const std::string normalized = BertNormalize(character, spec).value();
    const std::string kind = Kind(*pre_tokenizer, character);
    if (normalized == want.normalized && kind == want.kind) {
      ++equal;
    } else if (u_charType(static_cast<UChar32>(c)) == U_UNASSIGNED ||
               c == 0x11938) {
      // Unassigned in this ICU's Unicode (15.0; Rust's lower-casing is
      // newer), or U+11938, whose canonical decomposition came with Unicode
      // 13.0: the library's NFD tables are older and leave it whole.
      ++not_compared;
    } else if (different++ < 20) {
      ADD_FAILURE() << std::hex << "U+" << static_cast<uint32_t>(c)
                    << ": expected " << want.kind << " \"" << want.normalized
                    << "\", got " << kind << " \"" << normalized << "\"";
    }
  }
  std::cout << equal << " code points as the library; " << not_compared
            << " differ: unassigned in this ICU, or U+11938\n";
  EXPECT_EQ(different, 0);
}

}  // namespace
}  // namespace castserve::text
