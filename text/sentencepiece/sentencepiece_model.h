// libsentencepiece behind a header without it. Debian's
// sentencepiece_processor.h declares `absl::string_view` as std::string_view
// while Debian's Abseil has its own class of that name: the two cannot meet
// in one translation unit, so this class's .cc includes no Abseil header
// and the rest of //text includes no SentencePiece header. The library is
// not linked but loaded in isolation on first use (the .cc says why and
// how); Load reports a machine without it as an error.
//
// Immutable after Load; thread-safe.
#ifndef CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_MODEL_H_
#define CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace castserve::text {

class SentencePieceModel {
 public:
  // Null, with *error set, when `path` is not a SentencePiece model.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path,
                                                  std::string* error);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // False, with *error set, when the library fails.
  bool Encode(std::string_view text, std::vector<int>* ids,
              std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const;

  int piece_count() const;
  int bos_id() const;  // -1 when the model has none
  int pad_id() const;  // -1 when the model has none
  bool IsControl(int id) const;
  // The piece's id; -1 when no piece is `piece`.
  int PieceToId(std::string_view piece) const;

 private:
  explicit SentencePieceModel(void* processor);

  // A sentencepiece::SentencePieceProcessor of the loaded library; owned.
  void* const processor_;
};

}  // namespace castserve::text

#endif  // CASTSERVE_TEXT_SENTENCEPIECE_SENTENCEPIECE_MODEL_H_
