#include "server/log.h"

#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/support/log.h"
#include "platform/sanitized_text.h"

namespace castserve {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

bool NeedsQuoting(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' ||
        static_cast<unsigned char>(c) < 0x20) {
      return true;
    }
  }
  return false;
}

// The first `max_bytes` bytes of `text`, fewer to end on a character (not
// inside a UTF-8 sequence).
absl::string_view CutAtCharacter(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut);
}

// Appends `value`, quoted when it needs it: cut to its first
// kMaxLogValueBytes bytes first (a long value costs only what is kept), then
// quotes and backslashes escaped here, control characters and bytes that are
// no UTF-8 escaped and the whole bounded by platform::SanitizeText, followed
// by "...(N bytes)" when cut from a longer value (as Abbreviated).
void AppendBoundedValue(std::string& out, absl::string_view value) {
  if (!NeedsQuoting(value) && value.size() <= kMaxLogValueBytes &&
      platform::IsSanitized(value)) {
    out.append(value.data(), value.size());
    return;
  }
  const absl::string_view kept = CutAtCharacter(value, kMaxLogValueBytes);
  std::string escaped;
  escaped.reserve(kept.size() + 2);
  for (char c : kept) {
    if (c == '"' || c == '\\') escaped.push_back('\\');
    escaped.push_back(c);
  }
  out.push_back('"');
  // Escapes may lengthen it past the bound: SanitizeText then cuts it again
  // and ends it with "...".
  std::string sanitized =
      platform::SanitizeText(escaped, std::numeric_limits<size_t>::max());
  if (sanitized.size() > kMaxLogValueBytes) {
    sanitized = platform::SanitizeText(escaped, kMaxLogValueBytes);
  } else if (kept.size() < value.size()) {
    sanitized += "...";
  }
  out += sanitized;
  if (kept.size() < value.size()) {
    absl::StrAppend(&out, "(", value.size(), " bytes)");
  }
  out.push_back('"');
}

LogLevel FromGprSeverity(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return LogLevel::kDebug;
    case GPR_LOG_SEVERITY_INFO:
      // gRPC's info lines describe its internals (poller, TCP options).
      return LogLevel::kDebug;
    case GPR_LOG_SEVERITY_ERROR:
      return LogLevel::kError;
  }
  return LogLevel::kError;
}

// Admits at most kLibraryLogLinesPerSecond library lines a second; returns
// false for a line to drop, and sets `*dropped` to the lines dropped since
// the last admitted one.
bool AdmitLibraryLine(int64_t* dropped) {
  static absl::Mutex mu(absl::kConstInit);
  static absl::Time window_start ABSL_GUARDED_BY(mu);
  static int lines_in_window ABSL_GUARDED_BY(mu) = 0;
  static int64_t dropped_lines ABSL_GUARDED_BY(mu) = 0;
  absl::MutexLock lock(&mu);
  const absl::Time now = absl::Now();
  if (now - window_start >= absl::Seconds(1)) {
    window_start = now;
    lines_in_window = 0;
  }
  if (lines_in_window >= kLibraryLogLinesPerSecond) {
    ++dropped_lines;
    return false;
  }
  ++lines_in_window;
  *dropped = dropped_lines;
  dropped_lines = 0;
  return true;
}

void LogLibraryLine(LogLevel level, absl::string_view component,
                    absl::string_view message, absl::string_view source) {
  if (!LogEnabled(level)) return;
  int64_t dropped = 0;
  if (!AdmitLibraryLine(&dropped)) return;
  if (dropped > 0) {
    Log(level, message,
        {{"component", component}, {"source", source}, {"dropped", dropped}});
  } else {
    Log(level, message, {{"component", component}, {"source", source}});
  }
}

void LogFromGrpc(gpr_log_func_args* args) {
  const LogLevel level = FromGprSeverity(args->severity);
  if (!LogEnabled(level)) return;  // gRPC's debug lines are many.
  LogLibraryLine(level, "grpc", args->message,
                 absl::StrCat(args->file, ":", args->line));
}

void LogFromProtobuf(google::protobuf::LogLevel level, const char* filename,
                     int line, const std::string& message) {
  const LogLevel ours =
      level >= google::protobuf::LOGLEVEL_ERROR     ? LogLevel::kError
      : level == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarning
                                                    : LogLevel::kDebug;
  LogLibraryLine(ours, "protobuf", message, absl::StrCat(filename, ":", line));
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name,
                   "' (expected debug, info, warning or error)"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "error";
}

std::string FormatLogLine(LogLevel level, absl::string_view message,
                          std::initializer_list<LogField> fields) {
  std::string line =
      absl::StrCat("ts=",
                   absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " level=", LogLevelName(level), " msg=");
  AppendBoundedValue(line, message);
  for (const LogField& field : fields) {
    absl::StrAppend(&line, " ", field.key, "=");
    AppendBoundedValue(line, field.value);
  }
  return line;
}

void SetLogLevel(LogLevel level) {
  g_min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, absl::string_view message,
         std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  std::string line = FormatLogLine(level, message, fields);
  line.push_back('\n');
  // One write() per record: POSIX keeps it whole for pipes up to PIPE_BUF and
  // in practice for regular files and terminals too.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void RouteGrpcLogsToCastserveLog() {
  gpr_set_log_function(&LogFromGrpc);
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
  google::protobuf::SetLogHandler(&LogFromProtobuf);
}

std::string Abbreviated(absl::string_view text, size_t max_bytes) {
  const absl::string_view kept = CutAtCharacter(text, max_bytes);
  // Escapes may make the kept part up to four times longer; it is not cut
  // again.
  std::string abbreviated = platform::SanitizeText(kept, 4 * kept.size() + 3);
  if (kept.size() < text.size()) {
    absl::StrAppend(&abbreviated, "...(", text.size(), " bytes)");
  }
  return abbreviated;
}

}  // namespace castserve
