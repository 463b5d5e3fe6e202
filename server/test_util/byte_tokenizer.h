// A text::Tokenizer for generation tests: ids 0..255 are the bytes, 256 is
// a special EOS token (no text when special tokens are skipped); Encode
// writes BOS 257 then one id per byte. Decode writes the bytes, an
// incomplete UTF-8 character at the end as U+FFFD (as a byte-level decoder
// does). Thread-safe.
#ifndef CASTSERVE_SERVER_TEST_UTIL_BYTE_TOKENIZER_H_
#define CASTSERVE_SERVER_TEST_UTIL_BYTE_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/tokenizer.h"

namespace castserve::test_util {

class ByteTokenizer final : public text::Tokenizer {
 public:
  static constexpr int64_t kEos = 256;
  static constexpr int64_t kBos = 257;

  absl::StatusOr<text::Encoding> Encode(
      std::string_view text,
      const text::EncodeOptions& options) const override {
    text::Encoding encoding;
    if (options.add_special_tokens) encoding.ids.push_back(kBos);
    for (unsigned char c : text) encoding.ids.push_back(c);
    encoding.type_ids.assign(encoding.ids.size(), 0);
    return encoding;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids,
                                     bool skip_special_tokens) const override {
    std::string out;
    for (int64_t id : ids) {
      if (id < 0 || id > kBos) return absl::InvalidArgumentError("unknown id");
      if (id >= 256) {
        if (!skip_special_tokens) out += id == kEos ? "</s>" : "<s>";
        continue;
      }
      out.push_back(static_cast<char>(id));
    }
    // An incomplete character at the end becomes U+FFFD.
    size_t back = 0;
    while (back < out.size() && back < 3 &&
           (static_cast<unsigned char>(out[out.size() - 1 - back]) & 0xC0) ==
               0x80) {
      ++back;
    }
    if (back < out.size()) {
      const auto lead = static_cast<unsigned char>(out[out.size() - 1 - back]);
      const size_t need = lead >= 0xF0   ? 4
                          : lead >= 0xE0 ? 3
                          : lead >= 0xC0 ? 2
                                         : 1;
      if (need > back + 1)
        out.replace(out.size() - 1 - back, back + 1, "\xEF\xBF\xBD");
    }
    return out;
  }
  int64_t vocab_size() const override { return 258; }
  std::optional<int64_t> TokenToId(std::string_view) const override {
    return std::nullopt;
  }
  std::optional<int64_t> pad_id() const override { return std::nullopt; }
};

// The ids of `text`'s bytes.
inline std::vector<int64_t> ByteIds(std::string_view text) {
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

}  // namespace castserve::test_util

#endif  // CASTSERVE_SERVER_TEST_UTIL_BYTE_TOKENIZER_H_
