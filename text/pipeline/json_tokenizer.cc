#include "text/pipeline/json_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/pipeline/bpe.h"
#include "text/pipeline/unigram.h"
#include "text/pipeline/word_piece.h"
#include "text/unicode/unicode.h"

namespace castserve::text {
namespace {

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec) {
  if (spec.type == ModelSpec::Type::kUnigram) {
    absl::StatusOr<std::unique_ptr<Unigram>> unigram = Unigram::Create(spec);
    if (!unigram.ok()) return unigram.status();
    return std::unique_ptr<Model>(*std::move(unigram));
  }
  if (spec.type == ModelSpec::Type::kBpe) {
    absl::StatusOr<std::unique_ptr<Bpe>> bpe = Bpe::Create(spec);
    if (!bpe.ok()) return bpe.status();
    return std::unique_ptr<Model>(*std::move(bpe));
  }
  absl::StatusOr<std::unique_ptr<WordPiece>> word_piece =
      WordPiece::Create(spec);
  if (!word_piece.ok()) return word_piece.status();
  return std::unique_ptr<Model>(*std::move(word_piece));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JsonTokenizer>> JsonTokenizer::FromJson(
    std::string_view json) {
  absl::StatusOr<TokenizerSpec> spec =
      ParseTokenizerJson(absl::string_view(json.data(), json.size()));
  if (!spec.ok()) return spec.status();
  return Create(*spec);
}

absl::StatusOr<std::unique_ptr<JsonTokenizer>> JsonTokenizer::Create(
    const TokenizerSpec& spec) {
  std::unique_ptr<JsonTokenizer> tokenizer(new JsonTokenizer());
  if (spec.normalizer.has_value()) {
    absl::StatusOr<std::unique_ptr<Normalizer>> normalizer =
        Normalizer::Create(*spec.normalizer);
    if (!normalizer.ok()) return normalizer.status();
    tokenizer->normalizer_ = *std::move(normalizer);
  }
  if (spec.pre_tokenizer.has_value()) {
    absl::StatusOr<std::unique_ptr<PreTokenizer>> pre_tokenizer =
        PreTokenizer::Create(*spec.pre_tokenizer);
    if (!pre_tokenizer.ok()) return pre_tokenizer.status();
    tokenizer->pre_tokenizer_ = *std::move(pre_tokenizer);
  }
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(spec.model);
  if (!model.ok()) return model.status();
  tokenizer->model_ = *std::move(model);
  absl::StatusOr<std::unique_ptr<AddedVocabulary>> added =
      AddedVocabulary::Create(spec.added_tokens, tokenizer->normalizer_.get());
  if (!added.ok()) return added.status();
  tokenizer->added_ = *std::move(added);
  absl::StatusOr<std::unique_ptr<PostProcessor>> post_processor =
      PostProcessor::Create(
          spec.post_processor.has_value() ? &*spec.post_processor : nullptr);
  if (!post_processor.ok()) return post_processor.status();
  tokenizer->post_processor_ = *std::move(post_processor);
  absl::StatusOr<std::unique_ptr<Decoder>> decoder =
      Decoder::Create(spec.decoder.has_value() ? &*spec.decoder : nullptr);
  if (!decoder.ok()) return decoder.status();
  tokenizer->decoder_ = *std::move(decoder);
  tokenizer->pad_id_ = spec.padding_pad_id;
  if (!tokenizer->pad_id_.has_value())
    tokenizer->pad_id_ = tokenizer->TokenToId("[PAD]");
  if (!tokenizer->pad_id_.has_value())
    tokenizer->pad_id_ = tokenizer->TokenToId("<pad>");
  return tokenizer;
}

absl::StatusOr<std::vector<int64_t>> JsonTokenizer::Tokenize(
    std::string_view input) const {
  const absl::string_view text(input.data(), input.size());
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  std::vector<int64_t> ids;
  for (const AddedVocabulary::Segment& segment : added_->Split(text, false)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    const absl::string_view piece =
        text.substr(segment.begin, segment.end - segment.begin);
    if (absl::Status status = TokenizeText(piece, segment.begin == 0, &ids);
        !status.ok())
      return status;
  }
  return ids;
}

absl::StatusOr<Encoding> JsonTokenizer::Encode(
    std::string_view input, const EncodeOptions& options) const {
  absl::StatusOr<std::vector<int64_t>> ids = Tokenize(input);
  if (!ids.ok()) return ids.status();
  if (options.max_length > 0) {
    const int64_t reserved =
        options.add_special_tokens ? post_processor_->added_tokens() : 0;
    const int64_t keep = std::max<int64_t>(0, options.max_length - reserved);
    if (static_cast<int64_t>(ids->size()) > keep) ids->resize(keep);
  }
  return post_processor_->Apply(*ids, options.add_special_tokens);
}

namespace {

// tokenizers' longest_first truncation of a pair to `budget` tokens: the
// shorter text keeps what it can up to half, the longer one the rest.
void TruncatePair(int64_t budget, std::vector<int64_t>& a,
                  std::vector<int64_t>& b) {
  int64_t n1 = static_cast<int64_t>(a.size());
  int64_t n2 = static_cast<int64_t>(b.size());
  if (n1 + n2 <= budget) return;
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  if (static_cast<int64_t>(a.size()) > n1) a.resize(n1);
  if (static_cast<int64_t>(b.size()) > n2) b.resize(n2);
}

}  // namespace

absl::StatusOr<Encoding> JsonTokenizer::EncodePair(
    std::string_view first, std::string_view second,
    const EncodeOptions& options) const {
  if (!post_processor_->has_pair()) {
    return absl::FailedPreconditionError(
        "the tokenizer's post_processor has no pair template");
  }
  absl::StatusOr<std::vector<int64_t>> a = Tokenize(first);
  if (!a.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first text: ", a.status().message()));
  }
  absl::StatusOr<std::vector<int64_t>> b = Tokenize(second);
  if (!b.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the second text: ", b.status().message()));
  }
  if (options.max_length > 0) {
    const int64_t reserved =
        options.add_special_tokens ? post_processor_->added_pair_tokens() : 0;
    TruncatePair(std::max<int64_t>(0, options.max_length - reserved), *a, *b);
  }
  return post_processor_->ApplyPair(*a, *b, options.add_special_tokens);
}

absl::Status JsonTokenizer::TokenizeText(absl::string_view text,
                                         bool starts_text,
                                         std::vector<int64_t>* ids) const {
  std::string normalized;
  if (normalizer_ != nullptr) {
    absl::StatusOr<std::string> result = normalizer_->Normalize(text);
    if (!result.ok()) return result.status();
    normalized = *std::move(result);
    text = normalized;
  }
  for (const AddedVocabulary::Segment& segment : added_->Split(text, true)) {
    if (segment.id >= 0) {
      ids->push_back(segment.id);
      continue;
    }
    if (absl::Status status = TokenizeNormalized(
            text.substr(segment.begin, segment.end - segment.begin),
            starts_text && segment.begin == 0, ids);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status JsonTokenizer::TokenizeNormalized(
    absl::string_view text, bool starts_text, std::vector<int64_t>* ids) const {
  if (pre_tokenizer_ == nullptr) {
    return text.empty() ? absl::OkStatus() : model_->Tokenize(text, ids);
  }
  std::vector<std::string> words;
  pre_tokenizer_->PreTokenize(text, &words, starts_text);
  for (const std::string& word : words) {
    if (absl::Status status = model_->Tokenize(word, ids); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JsonTokenizer::Decode(
    absl::Span<const int64_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (const AddedTokenSpec* added = added_->Token(id)) {
      if (!(skip_special_tokens && added->special))
        tokens.push_back(added->content);
      continue;
    }
    const std::string* token = model_->vocabulary().Token(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no token has id ", id));
    }
    tokens.push_back(*token);
  }
  return decoder_->Decode(std::move(tokens));
}

int64_t JsonTokenizer::vocab_size() const {
  return std::max(model_->vocabulary().size(), added_->id_end());
}

std::optional<int64_t> JsonTokenizer::TokenToId(std::string_view input) const {
  const absl::string_view token(input.data(), input.size());
  if (std::optional<int64_t> id = added_->Find(token)) return id;
  return model_->vocabulary().Find(token);
}

}  // namespace castserve::text
