#include "text/pipeline/json_tokenizer.h"

#include <fstream>
#include <sstream>
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

constexpr char kMiniLmFolder[] = "text/testdata/all-MiniLM-L6-v2";

std::unique_ptr<Tokenizer> LoadMiniLm() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(kMiniLmFolder);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(JsonTokenizerTest, MiniLmEncodesAsTheTokenizersLibrary) {
  std::unique_ptr<Tokenizer> tokenizer = LoadMiniLm();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<Encoding> hello = tokenizer->Encode("Hello, world!", {});
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_THAT(hello->ids, ElementsAre(101, 7592, 1010, 2088, 999, 102));
  EXPECT_THAT(hello->type_ids, ElementsAre(0, 0, 0, 0, 0, 0));
  // Accents stripped, CJK split per character, [MASK] cut out before
  // normalization, an unknown word split into word pieces.
  absl::StatusOr<Encoding> mixed =
      tokenizer->Encode("Héllo Wörld 中文 [MASK] unaffable", {});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(mixed->ids, ElementsAre(101, 7592, 2088, 1746, 1861, 103, 14477,
                                      20961, 3468, 102));
  absl::StatusOr<Encoding> empty = tokenizer->Encode("", {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(empty->ids, ElementsAre(101, 102));
}

TEST(JsonTokenizerTest, MiniLmVocabularyAndPadding) {
  std::unique_ptr<Tokenizer> tokenizer = LoadMiniLm();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 30522);
  EXPECT_EQ(tokenizer->pad_id(), 0);
  EXPECT_EQ(tokenizer->TokenToId("[CLS]"), 101);
  EXPECT_EQ(tokenizer->TokenToId("##able"), 3085);
  EXPECT_EQ(tokenizer->TokenToId("no-such-token"), std::nullopt);
}

TEST(JsonTokenizerTest, TruncationKeepsTheSpecialTokens) {
  std::unique_ptr<Tokenizer> tokenizer = LoadMiniLm();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.max_length = 5;
  absl::StatusOr<Encoding> encoding =
      tokenizer->Encode("the quick brown fox jumps over", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->ids, ElementsAre(101, 1996, 4248, 2829, 102));
  options.max_length = 1;  // less room than the special tokens need
  encoding = tokenizer->Encode("the quick", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->ids, ElementsAre(101, 102));
  options.add_special_tokens = false;
  options.max_length = 2;
  encoding = tokenizer->Encode("the quick brown", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->ids, ElementsAre(1996, 4248));
  EXPECT_THAT(encoding->type_ids, ElementsAre(0, 0));
}

TEST(JsonTokenizerTest, InvalidUtf8IsInvalidArgument) {
  std::unique_ptr<Tokenizer> tokenizer = LoadMiniLm();
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& text :
       {std::string("abc\xff"), std::string("\xc3"),
        std::string("\xed\xa0\x80"), std::string("\xc0\xaf"),
        std::string("a\xf4\x90\x80\x80")}) {
    absl::StatusOr<Encoding> encoding = tokenizer->Encode(text, {});
    EXPECT_EQ(encoding.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(JsonTokenizerTest, MiniLmDecodesWithTheWordPieceDecoder) {
  std::unique_ptr<Tokenizer> tokenizer = LoadMiniLm();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int64_t> ids = {101, 7592, 1010, 2088, 999, 102};
  EXPECT_EQ(tokenizer->Decode(ids, true).value(), "hello, world!");
  EXPECT_EQ(tokenizer->Decode(ids, false).value(), "[CLS] hello, world! [SEP]");
  EXPECT_EQ(tokenizer->Decode({14477, 20961, 3468}, true).value(), "unaffable");
  EXPECT_EQ(tokenizer->Decode({-1}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

std::unique_ptr<Tokenizer> LoadLlama3StyleBpe() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer("text/testdata/bpe-llama3");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// Expected ids from the tokenizers library on the same file.
TEST(JsonTokenizerTest, ByteLevelBpeAddsBeginOfTextAndHonoursAddedTokenFlags) {
  std::unique_ptr<Tokenizer> tokenizer = LoadLlama3StyleBpe();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("Hello world", {})->ids,
              ElementsAre(0, 2386, 545));
  // "<L>" (lstrip, rstrip) swallows the spaces around it.
  EXPECT_THAT(tokenizer->Encode("a <L>  b", {})->ids,
              ElementsAre(0, 66, 3001, 67));
  // "[SW]" (single_word) only where no word character touches it.
  EXPECT_THAT(tokenizer->Encode("x[SW] [SW]", {})->ids,
              ElementsAre(0, 89, 1617, 62, 222, 3002));
  // A normalized, non-special added token.
  EXPECT_THAT(tokenizer->Encode("hello world!", {})->ids,
              ElementsAre(0, 3003, 2));
  EXPECT_EQ(tokenizer->TokenToId("<|begin_of_text|>"), 0);
  EXPECT_EQ(tokenizer->TokenToId("<L>"), 3001);
  EXPECT_EQ(tokenizer->vocab_size(), 3005);  // model 3000 + 5 added
  EXPECT_EQ(tokenizer->pad_id(), std::nullopt);
}

TEST(JsonTokenizerTest, ByteLevelBpeTruncatesBehindBeginOfText) {
  std::unique_ptr<Tokenizer> tokenizer = LoadLlama3StyleBpe();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.max_length = 3;
  EXPECT_THAT(tokenizer->Encode("the quick brown fox", options)->ids,
              ElementsAre(0, 1019, 222));
}

TEST(JsonTokenizerTest, ByteLevelBpeDecodesSkippingSpecialTokens) {
  std::unique_ptr<Tokenizer> tokenizer = LoadLlama3StyleBpe();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int64_t> ids = {0, 3000, 73,
                                    74};  // <|begin_of_text|><|eot_id|>hi
  EXPECT_EQ(tokenizer->Decode(ids, true).value(), "hi");
  EXPECT_EQ(tokenizer->Decode(ids, false).value(),
            "<|begin_of_text|><|eot_id|>hi");
  EXPECT_EQ(tokenizer->Decode({3005}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ByteLevel as GPT-2 and RoBERTa declare it (add_prefix_space, its own
// regex) over the Llama 3-style vocabulary; expected tokens from the
// tokenizers library with the same pre-tokenizer.
TEST(JsonTokenizerTest, ByteLevelWithPrefixSpaceAndGpt2Regex) {
  std::ifstream file("text/testdata/bpe-llama3/tokenizer.json");
  std::stringstream json;
  json << file.rdbuf();
  absl::StatusOr<TokenizerSpec> spec = ParseTokenizerJson(json.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  PreTokenizerSpec byte_level;
  byte_level.type = PreTokenizerSpec::Type::kByteLevel;
  byte_level.add_prefix_space = true;
  byte_level.use_regex = true;
  spec->pre_tokenizer = byte_level;
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::Create(*spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EncodeOptions options;
  options.add_special_tokens = false;
  auto ids_of = [&](std::vector<std::string> tokens) {
    std::vector<int64_t> ids;
    for (const std::string& token : tokens)
      ids.push_back((*tokenizer)->TokenToId(token).value());
    return ids;
  };
  EXPECT_EQ((*tokenizer)->Encode("hi there", options)->ids,
            ids_of({"\u0120h", "i", "\u0120there"}));
  EXPECT_EQ((*tokenizer)->Encode(" x", options)->ids, ids_of({"\u0120x"}));
  EXPECT_EQ((*tokenizer)->Encode(" ", options)->ids, ids_of({"\u0120"}));
  EXPECT_TRUE((*tokenizer)->Encode("", options)->ids.empty());
}

// The Metaspace pre-tokenizer (Mistral's files) over the Llama 2-style
// vocabulary without its normalizer: every prepend scheme, with and without
// split. Expected ids from the tokenizers library with the same settings.
TEST(JsonTokenizerTest, MetaspacePreTokenizer) {
  struct Case {
    std::string scheme;
    bool split;
    std::string text;
    std::vector<int64_t> ids;
  };
  const std::vector<Case> cases = {
      {"first", false, "Hello world", {619, 889, 1125, 60}},
      {"first", false, "</s>a b", {2, 57, 135, 58}},
      {"first", false, " x", {135, 80}},
      {"first",
       false,
       "Hello  world </s>x y",
       {619, 889, 135, 457, 2, 80, 135, 81}},
      {"first", false, "", {}},
      {"first", true, "Hello world", {619, 888, 71, 135, 1125, 60}},
      {"first", true, "</s>a b", {2, 57, 135, 58}},
      {"first", true, " x", {135, 80}},
      {"first",
       true,
       "Hello  world </s>x y",
       {619, 888, 71, 135, 135, 1125, 60, 135, 2, 80, 135, 81}},
      {"first", true, "", {}},
      {"always", false, "Hello world", {619, 889, 1125, 60}},
      {"always", false, "</s>a b", {2, 659, 135, 58}},
      {"always", false, " x", {135, 80}},
      {"always",
       false,
       "Hello  world </s>x y",
       {619, 889, 135, 457, 2, 135, 80, 135, 81}},
      {"always", false, "", {}},
      {"always", true, "Hello world", {619, 888, 71, 135, 1125, 60}},
      {"always", true, "</s>a b", {2, 659, 135, 58}},
      {"always", true, " x", {135, 80}},
      {"always",
       true,
       "Hello  world </s>x y",
       {619, 888, 71, 135, 135, 1125, 60, 135, 2, 135, 80, 135, 81}},
      {"always", true, "", {}},
      {"never", false, "Hello world", {39, 889, 1125, 60}},
      {"never", false, "</s>a b", {2, 57, 135, 58}},
      {"never", false, " x", {135, 80}},
      {"never",
       false,
       "Hello  world </s>x y",
       {39, 889, 135, 457, 2, 80, 135, 81}},
      {"never", false, "", {}},
      {"never", true, "Hello world", {39, 888, 71, 135, 1125, 60}},
      {"never", true, "</s>a b", {2, 57, 135, 58}},
      {"never", true, " x", {135, 80}},
      {"never",
       true,
       "Hello  world </s>x y",
       {39, 888, 71, 135, 135, 1125, 60, 135, 2, 80, 135, 81}},
      {"never", true, "", {}},
  };
  std::ifstream file("text/testdata/bpe-llama2/tokenizer.json");
  std::stringstream json;
  json << file.rdbuf();
  absl::StatusOr<TokenizerSpec> spec = ParseTokenizerJson(json.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->normalizer.reset();
  EncodeOptions options;
  options.add_special_tokens = false;
  for (const Case& c : cases) {
    PreTokenizerSpec metaspace;
    metaspace.type = PreTokenizerSpec::Type::kMetaspace;
    metaspace.split = c.split;
    metaspace.prepend_scheme =
        c.scheme == "first"    ? PreTokenizerSpec::PrependScheme::kFirst
        : c.scheme == "always" ? PreTokenizerSpec::PrependScheme::kAlways
                               : PreTokenizerSpec::PrependScheme::kNever;
    spec->pre_tokenizer = metaspace;
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::Create(*spec);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ((*tokenizer)->Encode(c.text, options)->ids, c.ids)
        << c.scheme << " split " << c.split << " \"" << c.text << "\"";
  }
}

// The Metaspace decoder; expected text from the tokenizers library.
TEST(JsonTokenizerTest, MetaspaceDecoder) {
  std::ifstream file("text/testdata/bpe-llama2/tokenizer.json");
  std::stringstream json;
  json << file.rdbuf();
  absl::StatusOr<TokenizerSpec> spec = ParseTokenizerJson(json.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::vector<int64_t> ids = {619, 888, 71,  135, 135, 1125, 60,
                                    135, 2,   135, 80,  135, 81};
  for (const bool prepend : {true, false}) {  // always/first; never
    DecoderSpec metaspace;
    metaspace.type = DecoderSpec::Type::kMetaspace;
    metaspace.replacement = "\u2581";
    metaspace.add_prefix_space = prepend;
    spec->decoder = metaspace;
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::Create(*spec);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    const std::string prefix = prepend ? "" : " ";
    EXPECT_EQ((*tokenizer)->Decode(ids, false).value(),
              prefix + "Hello  world </s> x y");
    EXPECT_EQ((*tokenizer)->Decode(ids, true).value(),
              prefix + "Hello  world  x y");
    EXPECT_EQ((*tokenizer)->Decode({135, 80}, true).value(), prefix + "x");
  }
}

TEST(JsonTokenizerTest, HostileTextsEncode) {
  std::unique_ptr<Tokenizer> bpe = LoadLlama3StyleBpe();
  std::unique_ptr<Tokenizer> minilm = LoadMiniLm();
  ASSERT_NE(bpe, nullptr);
  ASSERT_NE(minilm, nullptr);
  EncodeOptions options;
  options.add_special_tokens = false;
  for (const std::string unit :
       {"a", " ", "\n", "\xc3\xa9", "!", "1", "'", "[MASK]"}) {
    std::string text;
    while (text.size() < (size_t{1} << 18)) text += unit;
    absl::StatusOr<Encoding> bytes = bpe->Encode(text, options);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(bpe->Decode(bytes->ids, false).value(), text);
    EXPECT_TRUE(minilm->Encode(text, options).ok());
  }
}

TEST(JsonTokenizerTest, LoadTokenizerWithoutFilesIsNotFound) {
  EXPECT_EQ(LoadTokenizer("text/no-such-folder").status().code(),
            absl::StatusCode::kNotFound);
}

// A small valid BPE tokenizer.json with `model`/`pre_tokenizer` replaced.
std::string BpeJson(const std::string& model,
                    const std::string& pre_tokenizer) {
  return R"json({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": )json" +
         pre_tokenizer + R"json(, "post_processor": null,
    "decoder": {"type": "ByteLevel"}, "model": )json" +
         model + "}";
}

constexpr char kGoodModel[] =
    R"json({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})json";
constexpr char kGoodPreTokenizer[] =
    R"json({"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated", "invert": false})json";

std::string ErrorOf(const std::string& json) {
  absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
      JsonTokenizer::FromJson(json);
  if (tokenizer.ok()) return "OK";
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(tokenizer.status().message());
}

TEST(JsonTokenizerTest, MalformedFilesAreInvalidArgumentNamingTheField) {
  EXPECT_EQ(ErrorOf(BpeJson(kGoodModel, kGoodPreTokenizer)), "OK");
  EXPECT_THAT(ErrorOf(R"json({"normalizer": null})json"),
              HasSubstr("model: missing"));
  EXPECT_THAT(ErrorOf("{not json"), HasSubstr("invalid JSON at byte"));
  EXPECT_THAT(ErrorOf(R"json({"model": {}, "model": {}})json"),
              HasSubstr("duplicate key"));
  EXPECT_THAT(
      ErrorOf(BpeJson(R"json({"type": "WordLevel", "vocab": {}})json", "null")),
      HasSubstr("model.type: unsupported model type \"WordLevel\""));
  EXPECT_THAT(
      ErrorOf(BpeJson(
          R"json({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]})json",
          "null")),
      HasSubstr("model.merges[0]"));
  EXPECT_THAT(
      ErrorOf(BpeJson(
          R"json({"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]})json",
          "null")),
      HasSubstr("model.merges[0]"));
  EXPECT_THAT(
      ErrorOf(BpeJson(kGoodModel,
                      R"json({"type": "Split", "pattern": {"Regex": "(a"},
                                 "behavior": "Isolated"})json")),
      HasSubstr("pre_tokenizer.pattern: regular expression \"(a\""));
  EXPECT_THAT(
      ErrorOf(BpeJson(kGoodModel, R"json({"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "a(?=b)"},
           "behavior": "Isolated"}]})json")),
      HasSubstr("pre_tokenizer.pretokenizers[0].pattern"));
  EXPECT_THAT(
      ErrorOf(BpeJson(kGoodModel, R"json({"type": "Nope"})json")),
      HasSubstr("pre_tokenizer.type: unsupported pre-tokenizer type \"Nope\""));
  EXPECT_THAT(
      ErrorOf(BpeJson(R"json({"type": "WordPiece", "vocab": {"a": 0}})json",
                      "null")),
      HasSubstr("model.unk_token"));
}

// The id -> token table is dense: one token at a huge id would have it
// allocate millions of empty slots from a file of a few bytes.
TEST(JsonTokenizerTest, SparseIdsAreRefusedBeforeTheTableIsAllocated) {
  EXPECT_THAT(
      ErrorOf(BpeJson(
          R"json({"type": "BPE", "vocab": {"a": 0, "b": 16777215}, "merges": []})json",
          "null")),
      HasSubstr("the largest id is 16777215 for 2 tokens"));
  // Gaps up to the limit stay accepted.
  EXPECT_EQ(
      ErrorOf(BpeJson(
          R"json({"type": "BPE", "vocab": {"a": 0, "b": 65536}, "merges": []})json",
          "null")),
      "OK");
}

}  // namespace
}  // namespace castserve::text
