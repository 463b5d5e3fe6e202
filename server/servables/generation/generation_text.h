// GenerationText: the text of a sequence's new tokens as they come, for
// streaming. Each token's piece is what decoding all tokens so far added,
// found by decoding a short window (the token before the last emitted
// piece, for decoders that drop a leading space at the start, and the new
// ones) instead of the whole sequence every time. Text is held back while
//   - the window's text ends in an incomplete UTF-8 character (or U+FFFD,
//     which a byte-level decoder writes for one): never half a character;
//   - its end could still become a stop string.
// When a stop string appears, the text before it is the last piece and
// stopped() turns true; the stop string and what follows are never emitted.
//
// One sequence; used by one thread at a time.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_TEXT_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/tokenizer.h"

namespace castserve {

class GenerationText {
 public:
  // `tokenizer` must outlive the object; `stops` are non-empty UTF-8
  // strings (checked at the request's edge).
  GenerationText(const text::Tokenizer* tokenizer,
                 std::vector<std::string> stops);

  // Adds `token` and returns the text now safe to emit (often empty).
  // InvalidArgument for an id the tokenizer does not know. Must not be
  // called once stopped().
  absl::StatusOr<std::string> Append(int64_t token);

  // The text still held back, when generation ended without a stop string
  // (empty once stopped()): a last piece that may end in U+FFFD.
  absl::StatusOr<std::string> Flush();

  bool stopped() const { return stopped_; }

 private:
  // Decoded, not yet emitted: checks `pending_` for stop strings and
  // returns the part of it that may go out.
  std::string Release();
  absl::StatusOr<std::string> Decode(size_t begin, size_t end) const;

  const text::Tokenizer* const tokenizer_;
  const std::vector<std::string> stops_;
  std::vector<int64_t> ids_;
  // ids_[prefix_offset_, read_offset_) decode to text already moved to
  // pending_; what ids after read_offset_ add is new.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_TEXT_H_
