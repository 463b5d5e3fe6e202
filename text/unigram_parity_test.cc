// Unigram tokenizer.json files converted from SentencePiece models (the
// XLM-RoBERTa layout, the classic converter's, a byte_fallback one) encode,
// truncate and decode as the `tokenizers` library does, on the shared corpus
// and texts aimed at the Precompiled charsmap and unknown characters
// (tools/gen_unigram_fixtures.py writes fixtures and references).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "text/test_util/reference_corpus.h"
#include "text/tokenizer.h"

namespace castserve::text {
namespace {

constexpr char kFolder[] = "text/testdata/unigram/";

std::vector<std::string> Texts() {
  std::vector<std::string> texts = ReadCorpus();
  for (const std::string& line :
       ReadLines(absl::StrCat(kFolder, "extra_corpus.txt"))) {
    texts.push_back(Unescape(line));
  }
  return texts;
}

std::unique_ptr<Tokenizer> Load(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(absl::StrCat(kFolder, name));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

class UnigramParityTest : public testing::TestWithParam<std::string> {};

TEST_P(UnigramParityTest, IdsEqualTokenizers) {
  std::unique_ptr<Tokenizer> tokenizer = Load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = Texts();
  const std::vector<std::vector<int64_t>> expected =
      ReadIdsFile(absl::StrCat(kFolder, GetParam(), ".ids"));
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GE(texts.size(), 6000u);
  size_t equal = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Encoding> encoding = tokenizer->Encode(texts[i], {});
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    if (encoding->ids == expected[i]) {
      ++equal;
    } else if (i - equal < 10) {
      ADD_FAILURE() << GetParam() << " text " << i << " \""
                    << absl::CEscape(texts[i]) << "\"\n  expected "
                    << absl::StrJoin(expected[i], " ") << "\n  got      "
                    << absl::StrJoin(encoding->ids, " ");
    }
  }
  std::cout << GetParam() << ": " << equal << " of " << texts.size()
            << " texts give the reference ids\n";
  EXPECT_EQ(equal, texts.size());
}

TEST_P(UnigramParityTest, DecodesAsTokenizers) {
  std::unique_ptr<Tokenizer> tokenizer = Load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::vector<int64_t>> ids =
      ReadIdsFile(absl::StrCat(kFolder, GetParam(), ".ids"));
  const std::vector<std::string> expected =
      ReadLines(absl::StrCat(kFolder, GetParam(), ".decoded.txt"));
  ASSERT_EQ(ids.size(), expected.size());
  ASSERT_GE(ids.size(), 6000u);
  size_t equal = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<std::string> text = tokenizer->Decode(ids[i], true);
    ASSERT_TRUE(text.ok()) << text.status();
    if (*text == Unescape(expected[i])) {
      ++equal;
    } else if (i - equal < 10) {
      ADD_FAILURE() << GetParam() << " text " << i << ": expected \""
                    << absl::CEscape(Unescape(expected[i])) << "\", got \""
                    << absl::CEscape(*text) << "\"";
    }
  }
  std::cout << GetParam() << " decode: " << equal << " of " << ids.size()
            << " equal\n";
  EXPECT_EQ(equal, ids.size());
}

// Singles and pairs with longest_first truncation: ids and type ids.
TEST_P(UnigramParityTest, TruncatedSinglesAndPairsEqualTokenizers) {
  std::unique_ptr<Tokenizer> tokenizer = Load(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = Texts();
  const std::vector<std::string> cases =
      ReadLines(absl::StrCat(kFolder, GetParam(), ".truncated.txt"));
  ASSERT_GE(cases.size(), 500u);
  size_t equal = 0;
  size_t pairs = 0;
  for (const std::string& line : cases) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    ASSERT_EQ(fields.size(), 3u) << line;
    const std::vector<int64_t> header = ParseIds(fields[0]);
    ASSERT_EQ(header.size(), 3u) << line;
    ASSERT_LT(header[0], static_cast<int64_t>(texts.size()));
    ASSERT_LT(header[1], static_cast<int64_t>(texts.size()));
    EncodeOptions options;
    options.max_length = header[2];
    absl::StatusOr<Encoding> encoding =
        header[1] < 0 ? tokenizer->Encode(texts[header[0]], options)
                      : tokenizer->EncodePair(texts[header[0]],
                                              texts[header[1]], options);
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    pairs += header[1] >= 0;
    if (encoding->ids == ParseIds(fields[1]) &&
        encoding->type_ids == ParseIds(fields[2])) {
      ++equal;
    } else {
      ADD_FAILURE() << GetParam() << " case " << fields[0] << "\n  expected "
                    << fields[1] << " / " << fields[2] << "\n  got      "
                    << absl::StrJoin(encoding->ids, " ") << " / "
                    << absl::StrJoin(encoding->type_ids, " ");
    }
  }
  EXPECT_GE(pairs, 300u);
  EXPECT_EQ(equal, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, UnigramParityTest,
                         testing::Values("xlmr", "xlmr-converter",
                                         "byte-fallback"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace castserve::text
