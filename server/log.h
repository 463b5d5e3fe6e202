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
// escaped, so every record stays on one line.
std::string FormatLogLine(LogLevel level, absl::string_view message,
                          std::initializer_list<LogField> fields);

// Process-wide logging to stderr. Thread-safe; each record is written with one
// write() so lines from concurrent threads never interleave.
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, absl::string_view message,
         std::initializer_list<LogField> fields = {});

// Routes gRPC's own log output (gpr_log) through Log with component=grpc.
void RouteGrpcLogsToCastserveLog();

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LOG_H_
