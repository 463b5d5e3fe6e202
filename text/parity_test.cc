// Token ids equal the Python libraries' for every text of the committed
// corpus (tools/gen_tokenizer_references.py writes corpus and references).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/test_util/reference_corpus.h"
#include "text/tokenizer.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

std::unique_ptr<Tokenizer> Load(const std::string& folder) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(absl::StrCat("text/testdata/", folder));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// Encodes every corpus text and compares with the reference ids.
void ExpectReferenceIds(const std::string& folder, const std::string& reference,
                        bool add_special_tokens) {
  std::unique_ptr<Tokenizer> tokenizer = Load(folder);
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = ReadCorpus();
  const std::vector<std::vector<int64_t>> expected =
      ReadReferenceIds(reference);
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GE(texts.size(), 5000u);
  EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  size_t equal = 0;
  int reported = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Encoding> encoding = tokenizer->Encode(texts[i], options);
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    if (encoding->ids == expected[i]) {
      ++equal;
    } else if (reported++ < 10) {
      ADD_FAILURE() << reference << " text " << i << " \""
                    << absl::CEscape(texts[i]) << "\"\n  expected "
                    << absl::StrJoin(expected[i], " ") << "\n  got      "
                    << absl::StrJoin(encoding->ids, " ");
    }
  }
  std::cout << reference << ": " << equal << " of " << texts.size()
            << " texts give the reference ids\n";
  EXPECT_EQ(equal, texts.size());
}

TEST(ParityTest, MiniLmIdsEqualTokenizers) {
  ExpectReferenceIds("all-MiniLM-L6-v2", "minilm", true);
}

TEST(ParityTest, Llama3StyleBpeIdsEqualTokenizers) {
  ExpectReferenceIds("bpe-llama3", "bpe-llama3", true);
}

TEST(ParityTest, Qwen2StyleBpeIdsEqualTokenizers) {
  ExpectReferenceIds("bpe-qwen2", "bpe-qwen2", true);
}

TEST(ParityTest, Llama2StyleBpeIdsEqualTokenizers) {
  ExpectReferenceIds("bpe-llama2", "bpe-llama2", true);
}

TEST(ParityTest, SentencePieceIdsEqualTheSentencePieceLibrary) {
  ExpectReferenceIds("sentencepiece", "sentencepiece", false);
}

TEST(ParityTest, MiniLmDecodesAsTokenizers) {
  std::unique_ptr<Tokenizer> tokenizer = Load("all-MiniLM-L6-v2");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::vector<int64_t>> ids = ReadReferenceIds("minilm");
  const std::vector<std::string> expected =
      ReadLines(absl::StrCat(kReferencesFolder, "minilm.decoded.txt"));
  ASSERT_EQ(ids.size(), expected.size());
  size_t equal = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<std::string> text = tokenizer->Decode(ids[i], true);
    ASSERT_TRUE(text.ok()) << text.status();
    if (*text == Unescape(expected[i])) {
      ++equal;
    } else if (i - equal < 10) {
      ADD_FAILURE() << "text " << i << ": expected \""
                    << absl::CEscape(Unescape(expected[i])) << "\", got \""
                    << absl::CEscape(*text) << "\"";
    }
  }
  std::cout << "minilm decode: " << equal << " of " << ids.size() << " equal\n";
  EXPECT_EQ(equal, ids.size());
}

// Llama 2-style decoding (Replace, ByteFallback, Fuse, Strip) gives the
// text back except where the references say otherwise.
TEST(ParityTest, Llama2StyleBpeDecodesAsTokenizers) {
  std::unique_ptr<Tokenizer> tokenizer = Load("bpe-llama2");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = ReadCorpus();
  std::vector<std::string> expected = texts;
  for (const std::string& line :
       ReadLines(absl::StrCat(kReferencesFolder, "bpe-llama2.decoded.txt"))) {
    const size_t space = line.find(' ');
    size_t index = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line.substr(0, space), &index)) << line;
    ASSERT_LT(index, expected.size());
    expected[index] = Unescape(absl::string_view(line).substr(space + 1));
  }
  size_t equal = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Encoding> encoding = tokenizer->Encode(texts[i], {});
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    absl::StatusOr<std::string> decoded =
        tokenizer->Decode(encoding->ids, true);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (*decoded == expected[i]) {
      ++equal;
    } else if (i - equal < 10) {
      ADD_FAILURE() << "text " << i << ": expected \""
                    << absl::CEscape(expected[i]) << "\", got \""
                    << absl::CEscape(*decoded) << "\"";
    }
  }
  std::cout << "bpe-llama2 decode: " << equal << " of " << texts.size()
            << " equal\n";
  EXPECT_EQ(equal, texts.size());
}

// Byte-level BPE is lossless: every text decodes to itself, except where
// the file itself changes the text: Qwen2's NFC, the spaces the added token
// "<L>" (lstrip, rstrip) swallows, and Qwen2's normalized added token
// "cafe\u0301" (matched as NFC "café", decoded as its content).
TEST(ParityTest, ByteLevelBpeDecodesEveryTextToItself) {
  for (const std::string folder : {"bpe-llama3", "bpe-qwen2"}) {
    std::unique_ptr<Tokenizer> tokenizer = Load(folder);
    ASSERT_NE(tokenizer, nullptr);
    EncodeOptions options;
    options.add_special_tokens = false;
    size_t checked = 0;
    size_t equal = 0;
    for (const std::string& text : ReadCorpus()) {
      if (absl::StrContains(text, "<L>")) continue;
      std::string expected = text;
      if (folder == "bpe-qwen2") {
        expected = NormalizeUnicode(text, NormalizationForm::kNfc).value();
        if (absl::StrContains(expected, "caf\u00e9")) continue;
      }
      absl::StatusOr<Encoding> encoding = tokenizer->Encode(text, options);
      ASSERT_TRUE(encoding.ok()) << encoding.status();
      absl::StatusOr<std::string> decoded =
          tokenizer->Decode(encoding->ids, false);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ++checked;
      if (*decoded == expected) {
        ++equal;
      } else if (checked - equal <= 10) {
        ADD_FAILURE() << folder << ": \"" << absl::CEscape(text)
                      << "\" decodes to \"" << absl::CEscape(*decoded) << "\"";
      }
    }
    std::cout << folder << " round trip: " << equal << " of " << checked
              << " texts\n";
    EXPECT_GE(checked, 5000u);
    EXPECT_EQ(equal, checked);
  }
}

}  // namespace
}  // namespace castserve::text
