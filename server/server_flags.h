#ifndef CASTSERVE_SERVER_SERVER_FLAGS_H_
#define CASTSERVE_SERVER_SERVER_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/kernels/matmul_kernel.h"
#include "server/http/http_server_options.h"
#include "server/log.h"

namespace castserve {

// The largest thread count a flag or config accepts.
inline constexpr int kMaxThreads = 1024;
// The most connections an HTTP port (metrics, REST) may be asked to hold.
inline constexpr int kMaxMetricsConnections = 65536;

// The daemon's command line, parsed.
struct ServerFlags {
  std::string model_repository;
  // 0 asks the kernel for a free port; the chosen one is logged.
  int grpc_port = 8001;
  int metrics_port = 8002;
  // The KServe v2 REST port (--http-port); nullopt: --http-port=off.
  std::optional<int> http_port = 8000;
  // Address the listeners bind to. Empty (the default): 0.0.0.0 when
  // authentication is configured, else 127.0.0.1 (BindAddress).
  std::string bind_address;
  // The metrics port's connection limits (--metrics-max-connections,
  // --metrics-max-connections-per-ip, --metrics-connection-timeout-seconds,
  // --metrics-request-timeout-seconds).
  HttpServerLimits metrics_limits;
  // PEM files: HTTPS on the metrics port when the certificate and the key are
  // given (always both or neither), client certificates signed by the CA
  // required when it is given too. Empty: not given.
  std::string metrics_tls_cert_file;
  std::string metrics_tls_key_file;
  std::string metrics_tls_client_ca_file;
  // The same for the REST port (--http-max-connections, ...,
  // --http-tls-cert-file, ...). Its bodies are bounded by
  // --max-message-bytes.
  HttpServerLimits http_limits;
  std::string http_tls_cert_file;
  std::string http_tls_key_file;
  std::string http_tls_client_ca_file;
  // The same for the gRPC port; the files are watched and reloaded when
  // they change.
  std::string grpc_tls_cert_file;
  std::string grpc_tls_key_file;
  std::string grpc_tls_client_ca_file;
  // Bearer tokens with scopes (server/core/auth.h); empty: no tokens needed.
  std::string auth_token_file;
  // Serve on a non-loopback address without any authentication.
  bool allow_unauthenticated_remote_access = false;
  LogLevel log_level = LogLevel::kInfo;
  // How long SIGTERM/SIGINT waits for in-flight calls before cancelling them.
  double shutdown_grace_seconds = 10.0;
  // Server-wide memory budget for models, in bytes; 0 means none.
  int64_t memory_budget_bytes = 0;
  // Memory tiers (ModelManagerOptions): false only unloads under pressure.
  bool memory_tiers = true;
  // Idleness after which a model is demoted one tier, unless its config
  // says otherwise; InfiniteDuration: never.
  absl::Duration keep_alive = absl::InfiniteDuration();
  // Largest gRPC message accepted or sent; a larger request fails with
  // RESOURCE_EXHAUSTED.
  int64_t max_message_bytes = int64_t{256} << 20;
  // LibTorch threads per forward (0: the cores divided by the model's
  // instance count) and LibTorch's inter-op pool (0: its default).
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  // The CPU kernel of f32 layer products (models/kernels/matmul.h); kAuto
  // measures.
  models::F32MatmulKernel cpu_f32_matmul = models::F32MatmulKernel::kAuto;
  // Limits on model configs: instances of one model, and how long a model's
  // warmups may run before its load fails.
  int max_instances_per_model = 16;
  double max_warmup_seconds = 300;
  // Model folders, config.pbtxt files, checkpoints and warmup files may be
  // symlinks that lead outside the repository (RepositoryBoundary).
  bool allow_symlinks_outside_repository = false;
  bool show_help = false;
  bool show_version = false;
};

// Parses argv[1..]. Accepts `--flag=value` and `--flag value`; switches
// take no value (`--switch`, or `--switch=true|false`). Returns
// InvalidArgument with a one-line message naming the flag for unknown flags,
// missing or malformed values, a TLS certificate without its key (or the
// reverse), a client CA without both, and a missing --model-repository
// (unless --help or --version was given).
absl::StatusOr<ServerFlags> ParseServerFlags(
    const std::vector<std::string>& args);

// True when clients must authenticate on every port that serves models: a
// token file, or client certificates on the gRPC port and on the REST port
// (unless it is off).
bool AuthenticationConfigured(const ServerFlags& flags);

// The address to bind: --bind-address, or by default 0.0.0.0 with
// authentication and 127.0.0.1 without.
std::string BindAddress(const ServerFlags& flags);

// The text printed by --help.
std::string ServerUsage();

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVER_FLAGS_H_
