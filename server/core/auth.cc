#include "server/core/auth.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/log.h"

namespace castserve {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr uint64_t kMaxTokenFileBytes = uint64_t{1} << 20;
constexpr absl::Duration kRecheckInterval = absl::Seconds(1);

bool IsTokenCharacter(char c) { return c > ' ' && c < 127; }

// Equal contents in a time that depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t length = std::max(a.size(), b.size());
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    difference |= x ^ y;
  }
  return difference == 0;
}

absl::StatusOr<Scope> ParseScope(absl::string_view name) {
  for (Scope scope : {Scope::kInfer, Scope::kAdmin, Scope::kMetrics}) {
    if (name == ScopeName(scope)) return scope;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scope '", name.substr(0, 32), "' (infer, admin or metrics)"));
}

struct FileState {
  int64_t mtime_ns = 0;
  int64_t size = -1;
};

// A file system error (its message starts with the path) as the token
// file's.
absl::Status TokenFileError(const absl::Status& status) {
  return absl::InvalidArgumentError(
      absl::StrCat("token file ", status.message()));
}

absl::StatusOr<FileState> StatFile(platform::FileSystem& file_system,
                                   const std::string& path) {
  absl::StatusOr<platform::FileSystem::FileInfo> info = file_system.Stat(path);
  if (!info.ok()) return TokenFileError(info.status());
  if (info->type != platform::FileSystem::FileType::kRegular) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " is not a regular file"));
  }
  return FileState{info->mtime_ns, static_cast<int64_t>(info->size_bytes)};
}

}  // namespace

const char* ScopeName(Scope scope) {
  switch (scope) {
    case Scope::kInfer:
      return "infer";
    case Scope::kAdmin:
      return "admin";
    case Scope::kMetrics:
      return "metrics";
  }
  return "infer";
}

absl::StatusOr<std::vector<TokenGrant>> ParseTokenFile(
    absl::string_view text, absl::string_view source) {
  std::vector<TokenGrant> grants;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t comment = line.find('#');
    if (comment != absl::string_view::npos) line = line.substr(0, comment);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto error = [&](absl::string_view problem) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": ", problem));
    };
    if (fields.size() < 2 || fields.size() > 3) {
      return error("expected '<token> <scope>[,<scope>...] [expires=TIME]'");
    }
    TokenGrant grant;
    grant.token = std::string(fields[0]);
    if (grant.token.size() < kMinTokenLength ||
        grant.token.size() > kMaxTokenLength ||
        !std::all_of(grant.token.begin(), grant.token.end(),
                     IsTokenCharacter)) {
      return error(absl::StrCat("the token must be ", kMinTokenLength, " to ",
                                kMaxTokenLength,
                                " printable ASCII characters"));
    }
    for (absl::string_view name : absl::StrSplit(fields[1], ',')) {
      absl::StatusOr<Scope> scope = ParseScope(name);
      if (!scope.ok()) return error(scope.status().message());
      grant.scopes.push_back(*scope);
    }
    if (fields.size() == 3) {
      absl::string_view expires = fields[2];
      std::string parse_error;
      if (!absl::ConsumePrefix(&expires, "expires=") ||
          !absl::ParseTime(absl::RFC3339_full, expires, &grant.expires,
                           &parse_error)) {
        return error(
            "the third field must be expires=<RFC 3339 time>, e.g. "
            "expires=2027-01-31T00:00:00Z");
      }
    }
    grants.push_back(std::move(grant));
  }
  if (grants.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens"));
  }
  return grants;
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::Open(
    const std::string& path, platform::FileSystem* file_system,
    platform::Clock* clock) {
  std::unique_ptr<TokenAuthenticator> authenticator(
      new TokenAuthenticator(path, file_system, clock));
  if (absl::Status loaded = authenticator->Load(); !loaded.ok()) {
    return loaded;
  }
  return authenticator;
}

absl::Status TokenAuthenticator::Load() {
  absl::StatusOr<FileState> state = StatFile(*file_system_, path_);
  if (!state.ok()) return state.status();
  absl::StatusOr<std::string> text =
      file_system_->ReadFile(path_, kMaxTokenFileBytes);
  if (!text.ok()) return TokenFileError(text.status());
  absl::StatusOr<std::vector<TokenGrant>> grants =
      ParseTokenFile(*text, absl::StrCat("token file ", path_));
  if (!grants.ok()) return grants.status();
  absl::MutexLock lock(&mu_);
  grants_ = *std::move(grants);
  file_mtime_ns_ = state->mtime_ns;
  file_size_ = state->size;
  return absl::OkStatus();
}

void TokenAuthenticator::Refresh() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    if (now - last_check_ < kRecheckInterval) return;
    last_check_ = now;
    absl::StatusOr<FileState> state = StatFile(*file_system_, path_);
    if (state.ok() && state->mtime_ns == file_mtime_ns_ &&
        state->size == file_size_) {
      return;
    }
  }
  if (absl::Status loaded = Load(); !loaded.ok()) {
    Log(LogLevel::kError, "token file not reloaded; the tokens in force stay",
        {{"error", loaded.message()}});
  } else {
    Log(LogLevel::kInfo, "token file reloaded", {{"path", path_}});
  }
}

absl::Status TokenAuthenticator::Authorize(absl::string_view authorization,
                                           Scope scope) {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") &&
      !absl::ConsumePrefix(&token, "bearer ")) {
    return absl::UnauthenticatedError(
        authorization.empty()
            ? "missing authorization: send 'Bearer <token>'"
            : "malformed authorization: expected 'Bearer <token>'");
  }
  Refresh();
  absl::MutexLock lock(&mu_);
  // Every grant is compared, so that the time taken does not tell which.
  const TokenGrant* match = nullptr;
  for (const TokenGrant& grant : grants_) {
    if (ConstantTimeEquals(grant.token, token)) match = &grant;
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown token");
  if (clock_.Now() >= match->expires) {
    return absl::UnauthenticatedError("the token has expired");
  }
  if (std::find(match->scopes.begin(), match->scopes.end(), scope) ==
      match->scopes.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the token does not grant the '", ScopeName(scope), "' scope"));
  }
  return absl::OkStatus();
}

}  // namespace castserve
