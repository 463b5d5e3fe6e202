// A text::Tokenizer for tests: one token per space-separated word (its
// length + 10, so ids stay small), between [CLS] = 1 and [SEP] = 2; pad id
// chosen by the test. Text with a byte >= 0x80 that is not part of "é"
// (0xC3 0xA9) counts as invalid UTF-8. Thread-safe.
#ifndef CASTSERVE_SERVER_TEST_UTIL_FAKE_TOKENIZER_H_
#define CASTSERVE_SERVER_TEST_UTIL_FAKE_TOKENIZER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "text/tokenizer.h"

namespace castserve::test_util {

class FakeTokenizer final : public text::Tokenizer {
 public:
  explicit FakeTokenizer(std::optional<int64_t> pad_id = 0) : pad_id_(pad_id) {}

  absl::StatusOr<text::Encoding> Encode(
      std::string_view text,
      const text::EncodeOptions& options) const override {
    std::string cleaned(text);
    for (size_t at = cleaned.find("\xC3\xA9"); at != std::string::npos;
         at = cleaned.find("\xC3\xA9")) {
      cleaned.replace(at, 2, "e");
    }
    for (unsigned char c : cleaned) {
      if (c >= 0x80) return absl::InvalidArgumentError("not valid UTF-8");
    }
    text::Encoding encoding;
    const int64_t specials = options.add_special_tokens ? 2 : 0;
    int64_t words_left =
        options.max_length > 0
            ? std::max<int64_t>(options.max_length - specials, 0)
            : INT64_MAX;
    if (options.add_special_tokens) encoding.ids.push_back(1);
    for (absl::string_view word :
         absl::StrSplit(cleaned, ' ', absl::SkipEmpty())) {
      if (words_left-- <= 0) break;
      encoding.ids.push_back(static_cast<int64_t>(word.size()) + 10);
    }
    if (options.add_special_tokens) encoding.ids.push_back(2);
    encoding.type_ids.assign(encoding.ids.size(), 0);
    return encoding;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids,
                                     bool skip_special_tokens) const override {
    return absl::UnimplementedError("FakeTokenizer does not decode");
  }
  int64_t vocab_size() const override { return 100; }
  std::optional<int64_t> TokenToId(std::string_view token) const override {
    return std::nullopt;
  }
  std::optional<int64_t> pad_id() const override { return pad_id_; }

 private:
  const std::optional<int64_t> pad_id_;
};

}  // namespace castserve::test_util

#endif  // CASTSERVE_SERVER_TEST_UTIL_FAKE_TOKENIZER_H_
