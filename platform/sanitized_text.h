// SanitizeText: bytes from a file, a config or a request made safe to quote
// in a message, a log line or a response (a protobuf `string` field, JSON):
// valid UTF-8, no control characters, bounded length. The one helper for
// this; every place that quotes such bytes goes through it.
//
//   - Well-formed UTF-8 characters that print are kept as they are.
//   - Control characters are escaped: \n, \r, \t, and \xNN for the other
//     C0 controls and DEL; \u0080 .. \u009f for the C1 controls.
//   - Each byte of an ill-formed UTF-8 sequence (a stray continuation byte,
//     a truncated or overlong sequence, a surrogate, a code point above
//     U+10FFFF) becomes \xNN.
//   - The result is at most `max_bytes` bytes: when the sanitized text is
//     longer, it is cut before the first character or escape that would not
//     fit with "..." after it, and "..." is appended (never inside a
//     character or an escape). `max_bytes` below 3 counts as 3.
// Backslashes are kept: the result is for reading, not for reversing.
//
// No LibTorch, no protobuf: Abseil only. Stateless; thread-safe.
#ifndef CASTSERVE_PLATFORM_SANITIZED_TEXT_H_
#define CASTSERVE_PLATFORM_SANITIZED_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace castserve::platform {

// The default bound: enough for a path and a reason, short of flooding a
// log or a response.
inline constexpr size_t kMaxSanitizedTextBytes = 1024;

std::string SanitizeText(absl::string_view bytes,
                         size_t max_bytes = kMaxSanitizedTextBytes);

// True when SanitizeText leaves `text` as it is, whatever the bound: valid
// UTF-8 without control characters. For names that must be quotable as
// they are (a model's folder name is its name on the wire).
bool IsSanitized(absl::string_view text);

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_SANITIZED_TEXT_H_
