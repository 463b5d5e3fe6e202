#include "text/pipeline/unigram.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/pipeline/json_tokenizer.h"

namespace castserve::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tokenizer.json with only a Unigram model over `vocab` (a JSON list of
// [token, score]) and the model's other fields.
std::string UnigramJson(const std::string& vocab,
                        const std::string& fields = "\"unk_id\": 0") {
  return absl::StrCat(R"({"model": {"type": "Unigram", )", fields,
                      R"(, "vocab": )", vocab, "}}");
}

// The pieces of the `tokenizers` library's own Unigram example.
constexpr char kExampleVocab[] =
    R"([["<unk>", 0.0], ["a", 0.0], ["b", 0.0], ["c", 0.0], ["d", 0.0],
        ["cd", 1.0], ["ab", 2.0], ["abc", 5.0], ["abcd", 10.0]])";

std::vector<int64_t> Ids(const Tokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<Encoding> encoding = tokenizer.Encode(text, {});
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding.ok() ? encoding->ids : std::vector<int64_t>{};
}

TEST(UnigramTest, BestScoringSegmentationWithUnknownsFused) {
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::FromJson(UnigramJson(kExampleVocab));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // "abcd" (10) beats "abc"+"d" (5); "xx" is one unknown token.
  EXPECT_THAT(Ids(**tokenizer, "abcdacdxx"), ElementsAre(8, 1, 5, 0));
  EXPECT_THAT(Ids(**tokenizer, "xabx"), ElementsAre(0, 6, 0));
  EXPECT_THAT(Ids(**tokenizer, ""), ElementsAre());
  absl::StatusOr<std::string> text = (*tokenizer)->Decode({8, 1, 5}, false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "abcd a cd");  // no decoder: tokens joined by spaces
}

// Equal sums: the path whose last piece starts earliest wins ("a"+"bc"
// over "ab"+"c" when both score the same).
TEST(UnigramTest, TiesKeepThePathFoundFirst) {
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::FromJson(UnigramJson(
          R"([["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["c", -1.0],
              ["ab", -2.0], ["bc", -2.0]])"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(Ids(**tokenizer, "abc"), ElementsAre(1, 5));
}

// An unknown character scores the lowest score minus 10: "zb" (-1, the
// lowest) against unknown "z" (-11) + "b".
TEST(UnigramTest, UnknownScoreIsTheLowestScoreMinusTen) {
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> above =
      JsonTokenizer::FromJson(
          UnigramJson(R"([["<unk>", 0.0], ["b", 10.5], ["zb", -1.0]])"));
  ASSERT_TRUE(above.ok()) << above.status();
  EXPECT_THAT(Ids(**above, "zb"), ElementsAre(0, 1));  // -0.5 > -1
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> below =
      JsonTokenizer::FromJson(
          UnigramJson(R"([["<unk>", 0.0], ["b", 9.5], ["zb", -1.0]])"));
  ASSERT_TRUE(below.ok()) << below.status();
  EXPECT_THAT(Ids(**below, "zb"), ElementsAre(2));  // -1.5 < -1
}

TEST(UnigramTest, ByteFallbackSpellsUnknownRunsInBytes) {
  const std::string vocab =
      R"([["<unk>", 0.0], ["a", -1.0], ["<0xC3>", -5.0], ["<0xA9>", -5.0],
          ["<0x78>", -5.0]])";
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::FromJson(
          UnigramJson(vocab, R"("unk_id": 0, "byte_fallback": true)"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // "éx" is one fused unknown run: its three bytes.
  EXPECT_THAT(Ids(**tokenizer, "aéx"), ElementsAre(1, 2, 3, 4));
  // "y" has no <0x79> piece: the whole run stays unknown.
  EXPECT_THAT(Ids(**tokenizer, "aéy"), ElementsAre(1, 0));
}

TEST(UnigramTest, WithoutUnkIdAnUnknownCharacterIsAnError) {
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::FromJson(
          UnigramJson(R"([["a", -1.0], ["b", -1.0]])", R"("unk_id": null)"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(Ids(**tokenizer, "ab"), ElementsAre(0, 1));
  absl::StatusOr<Encoding> encoding = (*tokenizer)->Encode("abc", {});
  EXPECT_EQ(encoding.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(encoding.status().message(), HasSubstr("no unk_id"));
}

TEST(UnigramTest, MalformedModelsAreRefusedNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {UnigramJson("[]"), "model.vocab: empty"},
      {UnigramJson(R"([["a", 0.0]])", R"("unk_id": 1)"), "model.unk_id"},
      {UnigramJson(R"([["a", 0.0]])", R"("unk_id": -1)"), "model.unk_id"},
      {UnigramJson(R"([["a", 0.0], ["a", -1.0]])"), "listed twice"},
      {UnigramJson(R"([["a", "x"]])"),
       "model.vocab[0]: must be [token, score]"},
      {UnigramJson(R"({"a": 0})"), "model.vocab: must be an array"},
      {UnigramJson(R"([["a", 0.0]])", R"("unk_id": 0, "byte_fallback": 1)"),
       "model.byte_fallback"},
  };
  for (const auto& [json, message] : cases) {
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::FromJson(json);
    EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument)
        << json;
    EXPECT_THAT(tokenizer.status().message(), HasSubstr(message)) << json;
  }
}

TEST(UnigramTest, ScoresMustBeFinite) {
  ModelSpec spec;
  spec.type = ModelSpec::Type::kUnigram;
  spec.vocab = {{"a", 0}};
  spec.scores = {std::numeric_limits<double>::infinity()};
  absl::StatusOr<std::unique_ptr<Unigram>> unigram = Unigram::Create(spec);
  EXPECT_THAT(unigram.status().message(), HasSubstr("model.vocab[0]"));
}

// Components castserve lacks are refused at load, naming the field.
TEST(UnigramTest, UnknownComponentsAroundUnigramAreRefused) {
  const std::string model =
      R"("model": {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]})";
  const std::pair<std::string, std::string> cases[] = {
      {R"("normalizer": {"type": "Nmt"})",
       "normalizer.type: unsupported normalizer type \"Nmt\""},
      {R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled"}]})",
       "normalizer.normalizers[0].precompiled_charsmap: missing"},
      {R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": "!!"})",
       "normalizer.precompiled_charsmap: is not base64"},
      {R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAAAA=="})",
       "normalizer.precompiled_charsmap: the trie's size 0"},
      {R"("pre_tokenizer": {"type": "UnicodeScripts"})",
       "pre_tokenizer.type: unsupported pre-tokenizer type \"UnicodeScripts\""},
      {R"("decoder": {"type": "CTC"})",
       "decoder.type: unsupported decoder type \"CTC\""},
  };
  for (const auto& [component, message] : cases) {
    const std::string json = absl::StrCat("{", model, ", ", component, "}");
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::FromJson(json);
    EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument)
        << json;
    EXPECT_THAT(tokenizer.status().message(), HasSubstr(message)) << json;
  }
}

}  // namespace
}  // namespace castserve::text
