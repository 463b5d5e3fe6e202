// Pair encoding (a cross-encoder's query and document) against the
// `tokenizers` library: the reranker fixtures' tokenizer.json files
// (RobertaProcessing; TemplateProcessing with a pair template) and their
// pair_reference.json, written by tools/gen_encoder_fixtures.py, whole and
// truncated longest_first; BertProcessing's layout and the refusals.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/json_parser.h"
#include "text/pipeline/json_tokenizer.h"
#include "text/tokenizer.h"

namespace castserve::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class PairReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PairReferenceTest, EncodesPairsAsTheTokenizersLibrary) {
  const std::string folder = "models/testdata/" + GetParam();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(folder);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto reference =
      platform::ParseJson(ReadFile(folder + "/pair_reference.json"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  int checked = 0;
  for (const auto& c : reference->at("cases")) {
    EncodeOptions options;
    options.max_length = c.at("max_length").get<int64_t>();
    absl::StatusOr<Encoding> encoding =
        (*tokenizer)
            ->EncodePair(c.at("first").get<std::string>(),
                         c.at("second").get<std::string>(), options);
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    EXPECT_EQ(encoding->ids, c.at("ids").get<std::vector<int64_t>>())
        << c.dump();
    EXPECT_EQ(encoding->type_ids, c.at("type_ids").get<std::vector<int64_t>>())
        << c.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

INSTANTIATE_TEST_SUITE_P(Rerankers, PairReferenceTest,
                         ::testing::Values("xlm_roberta_reranker",
                                           "bert_reranker"));

// A WordPiece tokenizer.json over "a" and "b" with `post_processor`.
std::string WordPieceJson(const std::string& post_processor) {
  return absl::StrCat(
      R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
          "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "b": 4}},
          "pre_tokenizer": {"type": "WhitespaceSplit"},
          "post_processor": )",
      post_processor, "}");
}

TEST(PairEncodingTest, BertProcessingGivesTheSecondTextTypeOne) {
  auto tokenizer = JsonTokenizer::FromJson(WordPieceJson(
      R"({"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]})"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<Encoding> pair = (*tokenizer)->EncodePair("a a", "b", {});
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_THAT(pair->ids, ElementsAre(1, 3, 3, 2, 4, 2));
  EXPECT_THAT(pair->type_ids, ElementsAre(0, 0, 0, 0, 1, 1));
}

TEST(PairEncodingTest, RefusesWhatItCannotEncode) {
  auto single_only = JsonTokenizer::FromJson(WordPieceJson(
      R"({"type": "TemplateProcessing",
          "single": [{"Sequence": {"id": "A", "type_id": 0}}],
          "special_tokens": {}})"));
  ASSERT_TRUE(single_only.ok()) << single_only.status();
  EXPECT_EQ((*single_only)->EncodePair("a", "b", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto no_b = JsonTokenizer::FromJson(WordPieceJson(
      R"({"type": "TemplateProcessing",
          "single": [{"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
          "special_tokens": {}})"));
  EXPECT_THAT(no_b.status().message(), HasSubstr("pair: no sequence B"));
  auto pair = JsonTokenizer::FromJson(WordPieceJson(
      R"({"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]})"));
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ((*pair)->EncodePair("a", "\xff", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace castserve::text
