// No Abseil header here (see the header).
#include "text/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace castserve::text {

SentencePieceModel::SentencePieceModel(
    std::unique_ptr<sentencepiece::SentencePieceProcessor> processor)
    : processor_(std::move(processor)) {}

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(
    const std::string& path, std::string* error) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = processor->Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(
      new SentencePieceModel(std::move(processor)));
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const sentencepiece::util::Status status = processor_->Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  const sentencepiece::util::Status status = processor_->Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceModel::piece_count() const {
  return processor_->GetPieceSize();
}

int SentencePieceModel::bos_id() const { return processor_->bos_id(); }

int SentencePieceModel::pad_id() const { return processor_->pad_id(); }

bool SentencePieceModel::IsControl(int id) const {
  return processor_->IsControl(id);
}

int SentencePieceModel::PieceToId(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  // Unknown pieces map to the unknown piece's id.
  if (processor_->IsUnknown(id) && processor_->IdToPiece(id) != piece)
    return -1;
  return id;
}

}  // namespace castserve::text
