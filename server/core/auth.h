// Bearer tokens with scopes, for the gRPC port (the `authorization`
// metadata) and the metrics port (the Authorization header).
//
// Token file (--auth-token-file): one token per line,
//
//   <token> <scope>[,<scope>...] [expires=<RFC 3339 time>]
//
// with scopes `infer` (inference, metadata, config, statistics), `admin`
// (RepositoryIndex, RepositoryModelLoad/Unload) and `metrics` (GET
// /metrics); `#` starts a comment. Tokens are at least 16 characters of
// printable ASCII without spaces. Health checks (ServerLive, ServerReady,
// grpc.health.v1, /v2/health/*) never need a token.
//
// The file is read at start (an unusable file stops the daemon) and again
// whenever its modification time or size changes, checked at most once a
// second: rotating tokens is rewriting the file. A rewrite that cannot be
// used keeps the tokens in force and logs why. Tokens are compared in
// constant time and never logged.
#ifndef CASTSERVE_SERVER_CORE_AUTH_H_
#define CASTSERVE_SERVER_CORE_AUTH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "platform/file_system.h"

namespace castserve {

enum class Scope { kInfer, kAdmin, kMetrics };

// "infer", "admin", "metrics".
const char* ScopeName(Scope scope);

struct TokenGrant {
  std::string token;
  std::vector<Scope> scopes;
  absl::Time expires = absl::InfiniteFuture();
};

// The grants of a token file's text; InvalidArgument naming `source`, the
// line and the problem (never the token itself).
absl::StatusOr<std::vector<TokenGrant>> ParseTokenFile(
    absl::string_view text, absl::string_view source);

// Thread-safe.
class TokenAuthenticator {
 public:
  // Reads `path` through `file_system` (not owned; it must outlive the
  // authenticator, which re-reads the file when it changes); its errors are
  // ParseTokenFile's or the file's (InvalidArgument naming the path).
  // Expiry and the once-a-second recheck read `clock` (not owned; outlives
  // the authenticator).
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> Open(
      const std::string& path,
      platform::FileSystem* file_system = platform::FileSystem::Default(),
      platform::Clock* clock = &platform::Clock::Real());

  // OK when `authorization` ("Bearer <token>") names a token that grants
  // `scope` and has not expired. UNAUTHENTICATED when the header is
  // missing or malformed, the token unknown or expired; PERMISSION_DENIED
  // when it lacks the scope.
  absl::Status Authorize(absl::string_view authorization, Scope scope);

 private:
  TokenAuthenticator(std::string path, platform::FileSystem* file_system,
                     platform::Clock* clock)
      : path_(std::move(path)), file_system_(file_system), clock_(*clock) {}
  // Re-reads the file if it changed since the last look (at most once a
  // second).
  void Refresh() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  platform::FileSystem* const file_system_;
  platform::Clock& clock_;
  absl::Mutex mu_;
  std::vector<TokenGrant> grants_ ABSL_GUARDED_BY(mu_);
  absl::Time last_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t file_mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t file_size_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_CORE_AUTH_H_
