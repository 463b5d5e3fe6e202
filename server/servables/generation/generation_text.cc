#include "server/servables/generation/generation_text.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/types/span.h"

namespace castserve {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";

// Bytes a UTF-8 sequence led by `lead` has; 0 for a byte that cannot lead.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// True when `text` ends inside a character (its last lead byte announces
// more bytes than follow it).
bool EndsMidCharacter(absl::string_view text) {
  for (size_t back = 1; back <= std::min<size_t>(4, text.size()); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // A continuation byte.
    return SequenceLength(byte) > static_cast<int>(back);
  }
  return false;
}

}  // namespace

GenerationText::GenerationText(const text::Tokenizer* tokenizer,
                               std::vector<std::string> stops)
    : tokenizer_(tokenizer), stops_(std::move(stops)) {}

absl::StatusOr<std::string> GenerationText::Decode(size_t begin,
                                                   size_t end) const {
  return tokenizer_->Decode(
      absl::MakeConstSpan(ids_).subspan(begin, end - begin),
      /*skip_special_tokens=*/true);
}

absl::StatusOr<std::string> GenerationText::Append(int64_t token) {
  ids_.push_back(token);
  absl::StatusOr<std::string> before = Decode(prefix_offset_, read_offset_);
  if (!before.ok()) return before.status();
  absl::StatusOr<std::string> after = Decode(prefix_offset_, ids_.size());
  if (!after.ok()) return after.status();
  if (after->size() <= before->size() || absl::EndsWith(*after, kReplacement) ||
      EndsMidCharacter(*after)) {
    return std::string();  // Nothing new yet, or half a character.
  }
  // The window's text normally extends the text before it; where a decoder
  // rewrites it instead, what it adds in length is the best guess.
  pending_.append(*after, before->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return Release();
}

absl::StatusOr<std::string> GenerationText::Flush() {
  if (stopped_) return std::string();
  absl::StatusOr<std::string> before = Decode(prefix_offset_, read_offset_);
  if (!before.ok()) return before.status();
  absl::StatusOr<std::string> after = Decode(prefix_offset_, ids_.size());
  if (!after.ok()) return after.status();
  if (after->size() > before->size()) pending_.append(*after, before->size());
  prefix_offset_ = read_offset_ = ids_.size();
  std::string released = Release();
  if (!stopped_) released += std::exchange(pending_, std::string());
  return released;
}

std::string GenerationText::Release() {
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stops_) {
    stop_at = std::min(stop_at, pending_.find(stop));
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string released = pending_.substr(0, stop_at);
    pending_.clear();
    return released;
  }
  // Hold back the longest end of pending_ that begins a stop string.
  size_t held = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, pending_.size()); n > held; --n) {
      if (absl::EndsWith(pending_, absl::string_view(stop).substr(0, n))) {
        held = n;
        break;
      }
    }
  }
  std::string released = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return released;
}

}  // namespace castserve
