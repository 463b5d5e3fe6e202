#include "text/sentencepiece/sentencepiece_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/unicode/unicode.h"

namespace castserve::text {

SentencePieceTokenizer::SentencePieceTokenizer(
    std::unique_ptr<SentencePieceModel> model)
    : model_(std::move(model)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
SentencePieceTokenizer::Create(const std::string& model_path) {
  std::string error;
  std::unique_ptr<SentencePieceModel> model =
      SentencePieceModel::Load(model_path, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_path, ": not a SentencePiece model: ", error));
  }
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(std::move(model)));
}

absl::StatusOr<Encoding> SentencePieceTokenizer::Encode(
    std::string_view text, const EncodeOptions& options) const {
  if (!IsValidUtf8(absl::string_view(text.data(), text.size()))) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  std::vector<int> pieces;
  std::string error;
  if (!model_->Encode(text, &pieces, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece: ", error));
  }
  const bool add_bos = options.add_special_tokens && model_->bos_id() >= 0;
  if (options.max_length > 0) {
    const int64_t keep =
        std::max<int64_t>(0, options.max_length - (add_bos ? 1 : 0));
    if (static_cast<int64_t>(pieces.size()) > keep) pieces.resize(keep);
  }
  Encoding encoding;
  if (add_bos) encoding.ids.push_back(model_->bos_id());
  encoding.ids.insert(encoding.ids.end(), pieces.begin(), pieces.end());
  encoding.type_ids.assign(encoding.ids.size(), 0);
  return encoding;
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(
    absl::Span<const int64_t> ids, bool skip_special_tokens) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= model_->piece_count()) {
      return absl::InvalidArgumentError(absl::StrCat("no token has id ", id));
    }
    if (skip_special_tokens && model_->IsControl(static_cast<int>(id)))
      continue;
    pieces.push_back(static_cast<int>(id));
  }
  std::string text;
  std::string error;
  if (!model_->Decode(pieces, &text, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece: ", error));
  }
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return model_->piece_count();
}

std::optional<int64_t> SentencePieceTokenizer::TokenToId(
    std::string_view token) const {
  const int id = model_->PieceToId(token);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<int64_t> SentencePieceTokenizer::pad_id() const {
  const int id = model_->pad_id();
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace castserve::text
