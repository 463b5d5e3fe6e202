#include "text/pipeline/tokenizer_json.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"

namespace castserve::text {
namespace {

using Json = nlohmann::json;

absl::Status FieldError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string Child(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Index(absl::string_view path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

// `object[key]`, or null when `object` lacks it.
const Json* Find(const Json& object, absl::string_view key) {
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &*it;
}

absl::StatusOr<const Json*> Required(const Json& object, absl::string_view path,
                                     absl::string_view key) {
  const Json* value = Find(object, key);
  if (value == nullptr) return FieldError(Child(path, key), "missing");
  return value;
}

// Fields absent or null keep *out unchanged.
absl::Status ReadBool(const Json& object, absl::string_view path,
                      absl::string_view key, bool* out) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  if (!value->is_boolean())
    return FieldError(Child(path, key), "must be a boolean");
  *out = value->get<bool>();
  return absl::OkStatus();
}

// An integer literal that fits int64_t (non-negative ones are the
// library's number_unsigned).
bool IntegerValue(const Json& value, int64_t* out) {
  if (const auto* unsigned_value =
          value.get_ptr<const Json::number_unsigned_t*>()) {
    if (*unsigned_value > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(*unsigned_value);
    return true;
  }
  if (const auto* signed_value =
          value.get_ptr<const Json::number_integer_t*>()) {
    *out = *signed_value;
    return true;
  }
  return false;
}

absl::Status ReadInt(const Json& object, absl::string_view path,
                     absl::string_view key, int64_t* out) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  if (!IntegerValue(*value, out)) {
    return FieldError(Child(path, key), "must be an integer");
  }
  return absl::OkStatus();
}

absl::Status ReadString(const Json& object, absl::string_view path,
                        absl::string_view key, std::string* out) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  if (!value->is_string())
    return FieldError(Child(path, key), "must be a string");
  *out = value->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadOptionalString(const Json& object, absl::string_view path,
                                absl::string_view key,
                                std::optional<std::string>* out) {
  const Json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return absl::OkStatus();
  if (!value->is_string())
    return FieldError(Child(path, key), "must be a string");
  *out = value->get<std::string>();
  return absl::OkStatus();
}

#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    if (absl::Status s = (expr); !s.ok()) return s; \
  } while (0)

// The component's "type", looked up in `table`.
template <typename Enum, size_t N>
absl::StatusOr<Enum> ReadType(
    const Json& object, absl::string_view path, absl::string_view kind,
    const std::pair<absl::string_view, Enum> (&table)[N]) {
  if (!object.is_object()) return FieldError(path, "must be an object");
  std::string type;
  RETURN_IF_ERROR(ReadString(object, path, "type", &type));
  if (type.empty()) return FieldError(Child(path, "type"), "missing");
  for (const auto& [name, value] : table) {
    if (name == type) return value;
  }
  return FieldError(Child(path, "type"),
                    absl::StrCat("unsupported ", kind, " type \"", type, "\""));
}

absl::StatusOr<const Json*> RequiredArray(const Json& object,
                                          absl::string_view path,
                                          absl::string_view key) {
  absl::StatusOr<const Json*> value = Required(object, path, key);
  if (!value.ok()) return value.status();
  if (!(*value)->is_array())
    return FieldError(Child(path, key), "must be an array");
  return value;
}

absl::Status ReadPattern(const Json& object, absl::string_view path,
                         PatternSpec* out) {
  absl::StatusOr<const Json*> pattern = Required(object, path, "pattern");
  if (!pattern.ok()) return pattern.status();
  const std::string pattern_path = Child(path, "pattern");
  const Json* regex =
      (*pattern)->is_object() ? Find(**pattern, "Regex") : nullptr;
  const Json* literal =
      (*pattern)->is_object() ? Find(**pattern, "String") : nullptr;
  const Json* chosen = regex != nullptr ? regex : literal;
  if (chosen == nullptr || !chosen->is_string()) {
    return FieldError(pattern_path,
                      "must be {\"Regex\": string} or {\"String\": string}");
  }
  out->is_regex = regex != nullptr;
  out->text = chosen->get<std::string>();
  return absl::OkStatus();
}

// --- Normalizers ------------------------------------------------------------

// Precompiled's "precompiled_charsmap": standard base64, as the library
// writes it.
absl::Status ReadPrecompiledCharsmap(const Json& json, absl::string_view path,
                                     NormalizerSpec* spec) {
  absl::StatusOr<const Json*> value =
      Required(json, path, "precompiled_charsmap");
  if (!value.ok()) return value.status();
  const std::string field = Child(path, "precompiled_charsmap");
  if (!(*value)->is_string()) return FieldError(field, "must be a string");
  if (!absl::Base64Unescape((*value)->get_ref<const std::string&>(),
                            &spec->precompiled_charsmap)) {
    return FieldError(field, "is not base64");
  }
  return absl::OkStatus();
}

absl::StatusOr<NormalizerSpec> ParseNormalizer(const Json& json,
                                               const std::string& path) {
  using T = NormalizerSpec::Type;
  static constexpr std::pair<absl::string_view, T> kTypes[] = {
      {"BertNormalizer", T::kBert},
      {"NFC", T::kNfc},
      {"NFD", T::kNfd},
      {"NFKC", T::kNfkc},
      {"NFKD", T::kNfkd},
      {"Lowercase", T::kLowercase},
      {"Strip", T::kStrip},
      {"StripAccents", T::kStripAccents},
      {"Replace", T::kReplace},
      {"Prepend", T::kPrepend},
      {"Precompiled", T::kPrecompiled},
      {"Sequence", T::kSequence},
  };
  absl::StatusOr<T> type = ReadType(json, path, "normalizer", kTypes);
  if (!type.ok()) return type.status();
  NormalizerSpec spec;
  spec.type = *type;
  spec.path = path;
  switch (spec.type) {
    case T::kBert: {
      RETURN_IF_ERROR(ReadBool(json, path, "clean_text", &spec.clean_text));
      RETURN_IF_ERROR(ReadBool(json, path, "handle_chinese_chars",
                               &spec.handle_chinese_chars));
      RETURN_IF_ERROR(ReadBool(json, path, "lowercase", &spec.lowercase));
      const Json* strip = Find(json, "strip_accents");
      if (strip != nullptr && !strip->is_null()) {
        bool value = false;
        RETURN_IF_ERROR(ReadBool(json, path, "strip_accents", &value));
        spec.strip_accents = value;
      }
      break;
    }
    case T::kStrip:
      RETURN_IF_ERROR(ReadBool(json, path, "strip_left", &spec.strip_left));
      RETURN_IF_ERROR(ReadBool(json, path, "strip_right", &spec.strip_right));
      break;
    case T::kReplace:
      RETURN_IF_ERROR(ReadPattern(json, path, &spec.pattern));
      RETURN_IF_ERROR(ReadString(json, path, "content", &spec.content));
      break;
    case T::kPrepend:
      RETURN_IF_ERROR(ReadString(json, path, "prepend", &spec.content));
      break;
    case T::kPrecompiled:
      RETURN_IF_ERROR(ReadPrecompiledCharsmap(json, path, &spec));
      break;
    case T::kSequence: {
      absl::StatusOr<const Json*> list =
          RequiredArray(json, path, "normalizers");
      if (!list.ok()) return list.status();
      const std::string list_path = Child(path, "normalizers");
      for (size_t i = 0; i < (*list)->size(); ++i) {
        absl::StatusOr<NormalizerSpec> child =
            ParseNormalizer((**list)[i], Index(list_path, i));
        if (!child.ok()) return child.status();
        spec.normalizers.push_back(*std::move(child));
      }
      break;
    }
    default:
      break;
  }
  return spec;
}

// --- Pre-tokenizers ---------------------------------------------------------

absl::Status ReadBehavior(const Json& json, absl::string_view path,
                          PreTokenizerSpec::Behavior* out) {
  using B = PreTokenizerSpec::Behavior;
  static constexpr std::pair<absl::string_view, B> kBehaviors[] = {
      {"Removed", B::kRemoved},
      {"Isolated", B::kIsolated},
      {"MergedWithPrevious", B::kMergedWithPrevious},
      {"MergedWithNext", B::kMergedWithNext},
      {"Contiguous", B::kContiguous},
  };
  std::string behavior;
  RETURN_IF_ERROR(ReadString(json, path, "behavior", &behavior));
  if (behavior.empty()) return absl::OkStatus();
  for (const auto& [name, value] : kBehaviors) {
    if (name == behavior) {
      *out = value;
      return absl::OkStatus();
    }
  }
  return FieldError(Child(path, "behavior"),
                    absl::StrCat("unsupported behavior \"", behavior, "\""));
}

absl::Status ReadMetaspace(const Json& json, absl::string_view path,
                           PreTokenizerSpec* spec) {
  using Scheme = PreTokenizerSpec::PrependScheme;
  RETURN_IF_ERROR(ReadString(json, path, "replacement", &spec->replacement));
  RETURN_IF_ERROR(ReadBool(json, path, "split", &spec->split));
  bool add_prefix_space = true;  // files before prepend_scheme
  RETURN_IF_ERROR(ReadBool(json, path, "add_prefix_space", &add_prefix_space));
  std::string scheme = add_prefix_space ? "always" : "never";
  RETURN_IF_ERROR(ReadString(json, path, "prepend_scheme", &scheme));
  if (scheme == "always") {
    spec->prepend_scheme = Scheme::kAlways;
  } else if (scheme == "first") {
    spec->prepend_scheme = Scheme::kFirst;
  } else if (scheme == "never") {
    spec->prepend_scheme = Scheme::kNever;
  } else {
    return FieldError(Child(path, "prepend_scheme"),
                      absl::StrCat("unsupported \"", scheme, "\""));
  }
  if (spec->replacement.empty()) {
    return FieldError(Child(path, "replacement"), "must not be empty");
  }
  return absl::OkStatus();
}

absl::StatusOr<PreTokenizerSpec> ParsePreTokenizer(const Json& json,
                                                   const std::string& path) {
  using T = PreTokenizerSpec::Type;
  static constexpr std::pair<absl::string_view, T> kTypes[] = {
      {"BertPreTokenizer", T::kBert},
      {"ByteLevel", T::kByteLevel},
      {"Split", T::kSplit},
      {"Whitespace", T::kWhitespace},
      {"WhitespaceSplit", T::kWhitespaceSplit},
      {"Punctuation", T::kPunctuation},
      {"Metaspace", T::kMetaspace},
      {"Sequence", T::kSequence},
  };
  absl::StatusOr<T> type = ReadType(json, path, "pre-tokenizer", kTypes);
  if (!type.ok()) return type.status();
  PreTokenizerSpec spec;
  spec.type = *type;
  spec.path = path;
  switch (spec.type) {
    case T::kByteLevel:
      spec.add_prefix_space = true;  // the library's defaults
      RETURN_IF_ERROR(
          ReadBool(json, path, "add_prefix_space", &spec.add_prefix_space));
      RETURN_IF_ERROR(ReadBool(json, path, "use_regex", &spec.use_regex));
      break;
    case T::kSplit:
      RETURN_IF_ERROR(ReadPattern(json, path, &spec.pattern));
      RETURN_IF_ERROR(ReadBehavior(json, path, &spec.behavior));
      RETURN_IF_ERROR(ReadBool(json, path, "invert", &spec.invert));
      break;
    case T::kPunctuation:
      RETURN_IF_ERROR(ReadBehavior(json, path, &spec.behavior));
      break;
    case T::kMetaspace:
      RETURN_IF_ERROR(ReadMetaspace(json, path, &spec));
      break;
    case T::kSequence: {
      absl::StatusOr<const Json*> list =
          RequiredArray(json, path, "pretokenizers");
      if (!list.ok()) return list.status();
      const std::string list_path = Child(path, "pretokenizers");
      for (size_t i = 0; i < (*list)->size(); ++i) {
        absl::StatusOr<PreTokenizerSpec> child =
            ParsePreTokenizer((**list)[i], Index(list_path, i));
        if (!child.ok()) return child.status();
        spec.pretokenizers.push_back(*std::move(child));
      }
      break;
    }
    default:
      break;
  }
  return spec;
}

// --- Model ------------------------------------------------------------------

absl::Status ReadVocab(const Json& json, absl::string_view path,
                       ModelSpec* spec) {
  absl::StatusOr<const Json*> vocab = Required(json, path, "vocab");
  if (!vocab.ok()) return vocab.status();
  const std::string vocab_path = Child(path, "vocab");
  if (!(*vocab)->is_object())
    return FieldError(vocab_path, "must be an object");
  spec->vocab.reserve((*vocab)->size());
  for (const auto& [token, id] : (*vocab)->items()) {
    int64_t value = -1;
    if (!IntegerValue(id, &value) || value < 0) {
      return FieldError(absl::StrCat(vocab_path, "[\"", token, "\"]"),
                        "must be a non-negative integer");
    }
    spec->vocab.emplace_back(token, value);
  }
  return absl::OkStatus();
}

// "a b" strings (the older format) or ["a", "b"] pairs.
absl::Status ReadMerges(const Json& json, absl::string_view path,
                        ModelSpec* spec) {
  absl::StatusOr<const Json*> merges = RequiredArray(json, path, "merges");
  if (!merges.ok()) return merges.status();
  const std::string merges_path = Child(path, "merges");
  spec->merges.reserve((*merges)->size());
  for (size_t i = 0; i < (*merges)->size(); ++i) {
    const Json& merge = (**merges)[i];
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos ||
          text.find(' ', space + 1) != std::string::npos) {
        return FieldError(Index(merges_path, i),
                          "must be two tokens separated by one space");
      }
      spec->merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      spec->merges.emplace_back(merge[0].get<std::string>(),
                                merge[1].get<std::string>());
    } else {
      return FieldError(Index(merges_path, i),
                        "must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  return absl::OkStatus();
}

// Unigram's vocab: [[token, score], ...], the id being the index.
absl::Status ReadScoredVocab(const Json& json, absl::string_view path,
                             ModelSpec* spec) {
  absl::StatusOr<const Json*> vocab = RequiredArray(json, path, "vocab");
  if (!vocab.ok()) return vocab.status();
  const std::string vocab_path = Child(path, "vocab");
  spec->vocab.reserve((*vocab)->size());
  spec->scores.reserve((*vocab)->size());
  for (size_t i = 0; i < (*vocab)->size(); ++i) {
    const Json& entry = (**vocab)[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() ||
        !entry[1].is_number()) {
      return FieldError(Index(vocab_path, i), "must be [token, score]");
    }
    spec->vocab.emplace_back(entry[0].get<std::string>(),
                             static_cast<int64_t>(i));
    spec->scores.push_back(entry[1].get<double>());
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> ParseUnigram(const Json& json,
                                       const std::string& path) {
  ModelSpec spec;
  spec.type = ModelSpec::Type::kUnigram;
  RETURN_IF_ERROR(ReadScoredVocab(json, path, &spec));
  const Json* unk_id = Find(json, "unk_id");
  if (unk_id != nullptr && !unk_id->is_null()) {
    int64_t value = -1;
    if (!IntegerValue(*unk_id, &value) || value < 0) {
      return FieldError(Child(path, "unk_id"),
                        "must be a non-negative integer");
    }
    spec.unk_id = value;
  }
  RETURN_IF_ERROR(ReadBool(json, path, "byte_fallback", &spec.byte_fallback));
  return spec;
}

absl::StatusOr<ModelSpec> ParseModel(const Json& json,
                                     const std::string& path) {
  using T = ModelSpec::Type;
  static constexpr std::pair<absl::string_view, T> kTypes[] = {
      {"WordPiece", T::kWordPiece},
      {"BPE", T::kBpe},
      {"Unigram", T::kUnigram},
  };
  absl::StatusOr<T> type = ReadType(json, path, "model", kTypes);
  if (!type.ok()) return type.status();
  if (*type == T::kUnigram) return ParseUnigram(json, path);
  ModelSpec spec;
  spec.type = *type;
  RETURN_IF_ERROR(ReadVocab(json, path, &spec));
  RETURN_IF_ERROR(ReadOptionalString(json, path, "unk_token", &spec.unk_token));
  RETURN_IF_ERROR(ReadOptionalString(json, path, "continuing_subword_prefix",
                                     &spec.continuing_subword_prefix));
  if (spec.type == T::kWordPiece) {
    RETURN_IF_ERROR(ReadInt(json, path, "max_input_chars_per_word",
                            &spec.max_input_chars_per_word));
    return spec;
  }
  RETURN_IF_ERROR(ReadMerges(json, path, &spec));
  RETURN_IF_ERROR(ReadOptionalString(json, path, "end_of_word_suffix",
                                     &spec.end_of_word_suffix));
  RETURN_IF_ERROR(ReadBool(json, path, "fuse_unk", &spec.fuse_unk));
  RETURN_IF_ERROR(ReadBool(json, path, "byte_fallback", &spec.byte_fallback));
  RETURN_IF_ERROR(ReadBool(json, path, "ignore_merges", &spec.ignore_merges));
  const Json* dropout = Find(json, "dropout");
  if (dropout != nullptr && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return FieldError(Child(path, "dropout"), "BPE dropout is not supported");
  }
  return spec;
}

// --- Added tokens -----------------------------------------------------------

absl::Status ReadAddedTokens(const Json& root, TokenizerSpec* spec) {
  const Json* list = Find(root, "added_tokens");
  if (list == nullptr || list->is_null()) return absl::OkStatus();
  if (!list->is_array()) return FieldError("added_tokens", "must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& json = (*list)[i];
    const std::string path = Index("added_tokens", i);
    if (!json.is_object()) return FieldError(path, "must be an object");
    AddedTokenSpec token;
    token.id = -1;
    RETURN_IF_ERROR(ReadInt(json, path, "id", &token.id));
    RETURN_IF_ERROR(ReadString(json, path, "content", &token.content));
    if (token.id < 0)
      return FieldError(Child(path, "id"), "missing or negative");
    if (token.content.empty())
      return FieldError(Child(path, "content"), "missing or empty");
    RETURN_IF_ERROR(ReadBool(json, path, "special", &token.special));
    token.normalized = !token.special;  // the library's default
    RETURN_IF_ERROR(ReadBool(json, path, "single_word", &token.single_word));
    RETURN_IF_ERROR(ReadBool(json, path, "lstrip", &token.lstrip));
    RETURN_IF_ERROR(ReadBool(json, path, "rstrip", &token.rstrip));
    RETURN_IF_ERROR(ReadBool(json, path, "normalized", &token.normalized));
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

// --- Post-processors --------------------------------------------------------

// A template ("single" or "pair"): its pieces, special tokens or sequences.
absl::Status ReadTemplatePieces(const Json& json, absl::string_view path,
                                absl::string_view key,
                                std::vector<PostProcessorSpec::Piece>* out) {
  absl::StatusOr<const Json*> pieces = RequiredArray(json, path, key);
  if (!pieces.ok()) return pieces.status();
  for (size_t i = 0; i < (*pieces)->size(); ++i) {
    const Json& piece_json = (**pieces)[i];
    const std::string piece_path = Index(Child(path, key), i);
    const Json* special =
        piece_json.is_object() ? Find(piece_json, "SpecialToken") : nullptr;
    const Json* sequence =
        piece_json.is_object() ? Find(piece_json, "Sequence") : nullptr;
    const Json* body = special != nullptr ? special : sequence;
    if (body == nullptr || !body->is_object()) {
      return FieldError(
          piece_path, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
    PostProcessorSpec::Piece piece;
    piece.is_special_token = special != nullptr;
    RETURN_IF_ERROR(ReadString(*body, piece_path, "id", &piece.id));
    RETURN_IF_ERROR(ReadInt(*body, piece_path, "type_id", &piece.type_id));
    out->push_back(std::move(piece));
  }
  return absl::OkStatus();
}

absl::Status ReadTemplate(const Json& json, absl::string_view path,
                          PostProcessorSpec* spec) {
  RETURN_IF_ERROR(ReadTemplatePieces(json, path, "single", &spec->single));
  if (Find(json, "pair") != nullptr) {
    RETURN_IF_ERROR(ReadTemplatePieces(json, path, "pair", &spec->pair));
  }
  const Json* tokens = Find(json, "special_tokens");
  if (tokens == nullptr || !tokens->is_object()) return absl::OkStatus();
  for (const auto& [name, token] : tokens->items()) {
    const std::string token_path =
        absl::StrCat(path, ".special_tokens[\"", name, "\"]");
    const Json* ids = token.is_object() ? Find(token, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array())
      return FieldError(token_path, "needs an \"ids\" array");
    std::vector<int64_t> values;
    for (const Json& id : *ids) {
      int64_t value = 0;
      if (!IntegerValue(id, &value)) {
        return FieldError(token_path, "ids must be integers");
      }
      values.push_back(value);
    }
    spec->special_tokens.emplace_back(name, std::move(values));
  }
  return absl::OkStatus();
}

absl::Status ReadTokenPair(const Json& json, absl::string_view path,
                           absl::string_view key,
                           std::pair<std::string, int64_t>* out) {
  absl::StatusOr<const Json*> pair = Required(json, path, key);
  if (!pair.ok()) return pair.status();
  const Json& value = **pair;
  int64_t id = 0;
  if (!value.is_array() || value.size() != 2 || !value[0].is_string() ||
      !IntegerValue(value[1], &id)) {
    return FieldError(Child(path, key), "must be [token, id]");
  }
  *out = {value[0].get<std::string>(), id};
  return absl::OkStatus();
}

absl::StatusOr<PostProcessorSpec> ParsePostProcessor(const Json& json,
                                                     const std::string& path) {
  using T = PostProcessorSpec::Type;
  static constexpr std::pair<absl::string_view, T> kTypes[] = {
      {"TemplateProcessing", T::kTemplate}, {"BertProcessing", T::kBert},
      {"RobertaProcessing", T::kRoberta},   {"ByteLevel", T::kByteLevel},
      {"Sequence", T::kSequence},
  };
  absl::StatusOr<T> type = ReadType(json, path, "post-processor", kTypes);
  if (!type.ok()) return type.status();
  PostProcessorSpec spec;
  spec.type = *type;
  spec.path = path;
  switch (spec.type) {
    case T::kTemplate:
      RETURN_IF_ERROR(ReadTemplate(json, path, &spec));
      break;
    case T::kBert:
    case T::kRoberta:
      RETURN_IF_ERROR(ReadTokenPair(json, path, "cls", &spec.cls));
      RETURN_IF_ERROR(ReadTokenPair(json, path, "sep", &spec.sep));
      break;
    case T::kSequence: {
      absl::StatusOr<const Json*> list =
          RequiredArray(json, path, "processors");
      if (!list.ok()) return list.status();
      for (size_t i = 0; i < (*list)->size(); ++i) {
        absl::StatusOr<PostProcessorSpec> child = ParsePostProcessor(
            (**list)[i], Index(Child(path, "processors"), i));
        if (!child.ok()) return child.status();
        spec.processors.push_back(*std::move(child));
      }
      break;
    }
    default:
      break;
  }
  return spec;
}

// --- Decoders ---------------------------------------------------------------

absl::StatusOr<DecoderSpec> ParseDecoder(const Json& json,
                                         const std::string& path) {
  using T = DecoderSpec::Type;
  static constexpr std::pair<absl::string_view, T> kTypes[] = {
      {"WordPiece", T::kWordPiece}, {"ByteLevel", T::kByteLevel},
      {"Replace", T::kReplace},     {"ByteFallback", T::kByteFallback},
      {"Fuse", T::kFuse},           {"Strip", T::kStrip},
      {"Metaspace", T::kMetaspace}, {"Sequence", T::kSequence},
  };
  absl::StatusOr<T> type = ReadType(json, path, "decoder", kTypes);
  if (!type.ok()) return type.status();
  DecoderSpec spec;
  spec.type = *type;
  spec.path = path;
  switch (spec.type) {
    case T::kWordPiece:
      RETURN_IF_ERROR(ReadString(json, path, "prefix", &spec.prefix));
      RETURN_IF_ERROR(ReadBool(json, path, "cleanup", &spec.cleanup));
      break;
    case T::kReplace:
      RETURN_IF_ERROR(ReadPattern(json, path, &spec.pattern));
      RETURN_IF_ERROR(ReadString(json, path, "content", &spec.content));
      break;
    case T::kStrip:
      RETURN_IF_ERROR(ReadString(json, path, "content", &spec.content));
      RETURN_IF_ERROR(ReadInt(json, path, "start", &spec.strip_start));
      RETURN_IF_ERROR(ReadInt(json, path, "stop", &spec.strip_stop));
      break;
    case T::kMetaspace: {
      RETURN_IF_ERROR(ReadString(json, path, "replacement", &spec.replacement));
      std::string scheme = "always";
      RETURN_IF_ERROR(ReadString(json, path, "prepend_scheme", &scheme));
      RETURN_IF_ERROR(
          ReadBool(json, path, "add_prefix_space", &spec.add_prefix_space));
      if (scheme == "never") spec.add_prefix_space = false;
      break;
    }
    case T::kSequence: {
      absl::StatusOr<const Json*> list = RequiredArray(json, path, "decoders");
      if (!list.ok()) return list.status();
      for (size_t i = 0; i < (*list)->size(); ++i) {
        absl::StatusOr<DecoderSpec> child =
            ParseDecoder((**list)[i], Index(Child(path, "decoders"), i));
        if (!child.ok()) return child.status();
        spec.decoders.push_back(*std::move(child));
      }
      break;
    }
    default:
      break;
  }
  return spec;
}

// Parses root[key] with `parse` when present and not null.
template <typename Spec, typename Parse>
absl::Status ReadComponent(const Json& root, absl::string_view key, Parse parse,
                           std::optional<Spec>* out) {
  const Json* json = Find(root, key);
  if (json == nullptr || json->is_null()) return absl::OkStatus();
  absl::StatusOr<Spec> spec = parse(*json, std::string(key));
  if (!spec.ok()) return spec.status();
  *out = *std::move(spec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(absl::string_view text) {
  platform::JsonLimits limits;
  limits.max_bytes = kMaxTokenizerJsonBytes;
  const absl::StatusOr<Json> parsed = platform::ParseJson(text, limits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(parsed.status().message());
  }
  const Json& root = *parsed;
  if (!root.is_object())
    return absl::InvalidArgumentError("must be a JSON object");
  TokenizerSpec spec;
  absl::StatusOr<const Json*> model = Required(root, "", "model");
  if (!model.ok()) return model.status();
  absl::StatusOr<ModelSpec> model_spec = ParseModel(**model, "model");
  if (!model_spec.ok()) return model_spec.status();
  spec.model = *std::move(model_spec);
  RETURN_IF_ERROR(
      ReadComponent(root, "normalizer", ParseNormalizer, &spec.normalizer));
  RETURN_IF_ERROR(ReadComponent(root, "pre_tokenizer", ParsePreTokenizer,
                                &spec.pre_tokenizer));
  RETURN_IF_ERROR(ReadComponent(root, "post_processor", ParsePostProcessor,
                                &spec.post_processor));
  RETURN_IF_ERROR(ReadComponent(root, "decoder", ParseDecoder, &spec.decoder));
  RETURN_IF_ERROR(ReadAddedTokens(root, &spec));
  const Json* padding = Find(root, "padding");
  if (padding != nullptr && padding->is_object()) {
    int64_t pad_id = -1;
    RETURN_IF_ERROR(ReadInt(*padding, "padding", "pad_id", &pad_id));
    if (pad_id >= 0) spec.padding_pad_id = pad_id;
  }
  return spec;
}

#undef RETURN_IF_ERROR

}  // namespace castserve::text
