#ifndef CASTSERVE_SERVER_LOG_H_
#define CASTSERVE_SERVER_LOG_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace castserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning" (or "warn"), "error".
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
absl::string_view LogLevelName(LogLevel level);

// One key=value pair of a log line. Values are formatted with absl::StrCat.
struct LogField {
  template <typename T>
  LogField(absl::string_view key, const T& value)
      : key(key), value(absl::StrCat(value)) {}
  LogField(absl::string_view key, absl::string_view value)
      : key(key), value(value) {}
  LogField(absl::string_view key, const char* value) : key(key), value(value) {}

  std::string key;
  std::string value;
};

// Formats one logfmt line without the trailing newline:
//   ts=2026-11-29T15:43:09.123Z level=info msg="model found" name=bert
// Values with spaces, quotes, '=' or control characters are quoted and
// escaped, so every record stays on one line; the message and each value are
// made valid UTF-8 with control characters escaped and cut to
// kMaxLogValueBytes (platform/sanitized_text.h), followed by "(N bytes)" when
// cut from a longer value.
inline constexpr size_t kMaxLogValueBytes = 1024;
std::string FormatLogLine(LogLevel level, absl::string_view message,
                          std::initializer_list<LogField> fields);

// Process-wide logging to stderr. Thread-safe; each record is written with one
// write() so lines from concurrent threads never interleave.
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, absl::string_view message,
         std::initializer_list<LogField> fields = {});

// Routes gRPC's own log output (gpr_log) through Log with component=grpc,
// and protobuf's (a request with invalid UTF-8 in a string field, say) with
// component=protobuf. Both are rate-limited together: at most
// kLibraryLogLinesPerSecond lines a second; the next line after a
// suppressed stretch says how many were dropped.
inline constexpr int kLibraryLogLinesPerSecond = 10;
void RouteGrpcLogsToCastserveLog();

// `text` for an error message or a log value: up to `max_bytes`, as is;
// else its first `max_bytes` bytes (fewer, to end on a character) and
// "...(N bytes)"; the kept part through platform::SanitizeText (control
// characters and bytes that are no UTF-8 escaped). Names and other strings
// that come from a request go through it, so a 100 KB name cannot become a
// 100 KB status message.
std::string Abbreviated(absl::string_view text, size_t max_bytes = 128);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LOG_H_
