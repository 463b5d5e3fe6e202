// tokenizer.json (Hugging Face `tokenizers`' serialization) read into plain
// structs. The only file of //text that touches JSON (nlohmann/json through
// //platform:json_parser): the parts
// that build and run the pipeline work on these structs.
//
// Validation here is about shape: each component's "type" must be one this
// package implements, fields must have their JSON types. Errors are
// InvalidArgument naming the field by its path ("model.merges[3]",
// "pre_tokenizer.pretokenizers[0].pattern"). Semantic checks (a merge naming
// a token the vocabulary lacks, a regex RE2 cannot compile) are the
// builders'; they name the field the same way.
#ifndef CASTSERVE_TEXT_PIPELINE_TOKENIZER_JSON_H_
#define CASTSERVE_TEXT_PIPELINE_TOKENIZER_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/unicode/split_pattern.h"

namespace castserve::text {

struct NormalizerSpec {
  enum class Type {
    kBert,
    kNfc,
    kNfd,
    kNfkc,
    kNfkd,
    kLowercase,
    kStrip,
    kStripAccents,
    kReplace,
    kPrepend,
    kPrecompiled,
    kSequence,
  };
  Type type = Type::kSequence;
  std::string path;  // "normalizer.normalizers[1]", for messages
  // BertNormalizer
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // null: follows lowercase
  bool lowercase = true;
  // Strip
  bool strip_left = false;
  bool strip_right = false;
  // Replace (pattern -> content), Prepend (content)
  PatternSpec pattern;
  std::string content;
  // Precompiled: the SentencePiece normalizer's charsmap, base64-decoded
  // (its structure is checked by the builder, precompiled_charsmap.h).
  std::string precompiled_charsmap;
  std::vector<NormalizerSpec> normalizers;  // Sequence
};

struct PreTokenizerSpec {
  enum class Type {
    kBert,
    kByteLevel,
    kSplit,
    kWhitespace,
    kWhitespaceSplit,
    kMetaspace,
    kPunctuation,
    kSequence,
  };
  enum class Behavior {
    kRemoved,
    kIsolated,
    kMergedWithPrevious,
    kMergedWithNext,
    kContiguous,
  };
  Type type = Type::kSequence;
  std::string path;
  // Split, Punctuation (behavior only)
  PatternSpec pattern;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // Metaspace
  enum class PrependScheme { kAlways, kFirst, kNever };
  std::string replacement = "\u2581";
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
  std::vector<PreTokenizerSpec> pretokenizers;  // Sequence
};

struct ModelSpec {
  enum class Type { kWordPiece, kBpe, kUnigram };
  Type type = Type::kWordPiece;
  // token -> id; for Unigram the list's order (id = index).
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  // WordPiece
  int64_t max_input_chars_per_word = 100;
  // BPE
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;  // BPE and Unigram
  bool ignore_merges = false;
  // Unigram: each token's score (log probability), by id, and the unknown
  // token's id.
  std::vector<double> scores;
  std::optional<int64_t> unk_id;
};

struct AddedTokenSpec {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

struct PostProcessorSpec {
  enum class Type { kTemplate, kBert, kRoberta, kByteLevel, kSequence };
  struct Piece {
    bool is_special_token = false;
    std::string id;  // the special token's name; "A" or "B" for a sequence
    int64_t type_id = 0;
  };
  Type type = Type::kTemplate;
  std::string path;
  // TemplateProcessing: the "single" and "pair" templates (pair empty when
  // the file has none) and the special tokens' ids.
  std::vector<Piece> single;
  std::vector<Piece> pair;
  std::vector<std::pair<std::string, std::vector<int64_t>>> special_tokens;
  // BertProcessing / RobertaProcessing: [token, id]
  std::pair<std::string, int64_t> cls;
  std::pair<std::string, int64_t> sep;
  std::vector<PostProcessorSpec> processors;  // Sequence
};

struct DecoderSpec {
  enum class Type {
    kWordPiece,
    kByteLevel,
    kReplace,
    kByteFallback,
    kFuse,
    kStrip,
    kMetaspace,
    kSequence,
  };
  Type type = Type::kByteLevel;
  std::string path;
  std::string prefix = "##";  // WordPiece
  bool cleanup = true;        // WordPiece
  PatternSpec pattern;        // Replace (a String pattern)
  std::string content;        // Replace; Strip's character
  int64_t strip_start = 0;    // Strip
  int64_t strip_stop = 0;
  std::string replacement;            // Metaspace
  bool add_prefix_space = true;       // Metaspace (prepend_scheme != never)
  std::vector<DecoderSpec> decoders;  // Sequence
};

struct TokenizerSpec {
  std::optional<NormalizerSpec> normalizer;
  std::optional<PreTokenizerSpec> pre_tokenizer;
  ModelSpec model;
  std::optional<PostProcessorSpec> post_processor;
  std::optional<DecoderSpec> decoder;
  std::vector<AddedTokenSpec> added_tokens;
  std::optional<int64_t> padding_pad_id;  // "padding": {"pad_id": ...}
};

// The longest tokenizer.json read (large vocabularies are tens of MB).
inline constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;

// Parses the text of a tokenizer.json, through platform::ParseJson (depth
// and size bounded, duplicate keys refused; syntax errors with their byte).
absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view json);

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_PIPELINE_TOKENIZER_JSON_H_
