#include "text/sentencepiece/sentencepiece_tokenizer.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace castserve::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// text/testdata/sentencepiece: a unigram model the generator trains (unk 0,
// bos 1, eos 2, pad 3, byte fallback); expected ids from the Python library.
std::unique_ptr<Tokenizer> Load() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer("text/testdata/sentencepiece");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(SentencePieceTokenizerTest, EncodesWithBosWhenAskedForSpecialTokens) {
  std::unique_ptr<Tokenizer> tokenizer = Load();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions plain;
  plain.add_special_tokens = false;
  EXPECT_THAT(tokenizer->Encode("Hello world", plain)->ids,
              ElementsAre(481, 599, 524, 495, 445));
  absl::StatusOr<Encoding> with_bos = tokenizer->Encode("Hello world", {});
  ASSERT_TRUE(with_bos.ok());
  EXPECT_THAT(with_bos->ids, ElementsAre(1, 481, 599, 524, 495, 445));
  EXPECT_THAT(with_bos->type_ids, ElementsAre(0, 0, 0, 0, 0, 0));
  EncodeOptions truncated;
  truncated.max_length = 3;
  EXPECT_THAT(tokenizer->Encode("Hello world", truncated)->ids,
              ElementsAre(1, 481, 599));
}

TEST(SentencePieceTokenizerTest, DecodesAndAnswersVocabularyQuestions) {
  std::unique_ptr<Tokenizer> tokenizer = Load();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Decode({1, 481, 599, 524, 495, 445}, true).value(),
            "Hello world");
  EXPECT_EQ(tokenizer->Decode({600}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer->vocab_size(), 600);
  EXPECT_EQ(tokenizer->pad_id(), 3);
  EXPECT_EQ(tokenizer->TokenToId("<pad>"), 3);
  EXPECT_EQ(tokenizer->TokenToId("<0x01>"), 5);
  EXPECT_EQ(tokenizer->TokenToId("no such piece"), std::nullopt);
}

TEST(SentencePieceTokenizerTest, RefusesInvalidUtf8AndNonModels) {
  std::unique_ptr<Tokenizer> tokenizer = Load();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("a\xff", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> not_a_model =
      SentencePieceTokenizer::Create(
          "text/testdata/all-MiniLM-L6-v2/tokenizer.json");
  ASSERT_FALSE(not_a_model.ok());
  EXPECT_EQ(not_a_model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_a_model.status().message(), HasSubstr("tokenizer.json"));
}

}  // namespace
}  // namespace castserve::text
