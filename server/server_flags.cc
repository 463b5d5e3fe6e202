#include "server/server_flags.h"

#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace castserve {
namespace {

absl::Status ParsePort(absl::string_view flag, const std::string& value,
                       int* port) {
  if (!absl::SimpleAtoi(value, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": '", value, "' is not a port number (0-65535)"));
  }
  return absl::OkStatus();
}

// A byte count: digits with an optional binary suffix (KiB, MiB, GiB),
// between `min_bytes` and `max_bytes`.
absl::Status ParseBytes(absl::string_view flag, const std::string& value,
                        int64_t min_bytes, int64_t max_bytes, int64_t* bytes) {
  absl::string_view digits = value;
  int shift = 0;
  for (const auto& [suffix, suffix_shift] :
       {std::pair<absl::string_view, int>{"KiB", 10},
        {"MiB", 20},
        {"GiB", 30}}) {
    if (absl::ConsumeSuffix(&digits, suffix)) shift = suffix_shift;
  }
  int64_t number = 0;
  if (!absl::SimpleAtoi(digits, &number) || number < 0 ||
      number > (max_bytes >> shift) || (number << shift) < min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": '", value, "' is not a byte count between ", min_bytes,
        " and ", max_bytes, " (suffixes KiB, MiB, GiB allowed)"));
  }
  *bytes = number << shift;
  return absl::OkStatus();
}

// An integer count of `what` ("thread count", "count") between `min` and
// `max`.
absl::Status ParseCount(absl::string_view flag, const std::string& value,
                        absl::string_view what, int min, int max, int* count) {
  if (!absl::SimpleAtoi(value, count) || *count < min || *count > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", value, "' is not a ", what, " between ",
                     min, " and ", max));
  }
  return absl::OkStatus();
}

// Flags that take no value (or =true / =false), by name.
const std::map<std::string, bool ServerFlags::*, std::less<>>& SwitchFlags() {
  static const auto* flags =
      new std::map<std::string, bool ServerFlags::*, std::less<>>{
          {"allow-symlinks-outside-repository",
           &ServerFlags::allow_symlinks_outside_repository},
          {"allow-unauthenticated-remote-access",
           &ServerFlags::allow_unauthenticated_remote_access},
          {"memory-tiers", &ServerFlags::memory_tiers},
      };
  return *flags;
}

absl::Status ParseFilePath(absl::string_view flag, const std::string& value,
                           std::string* path) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty path"));
  }
  *path = value;
  return absl::OkStatus();
}

// The TLS files of port `prefix` ("metrics", "grpc", "http") go together:
// a certificate needs its key, client certificates need the server's own.
absl::Status CheckTlsFiles(absl::string_view prefix, const std::string& cert,
                           const std::string& key,
                           const std::string& client_ca) {
  const std::string cert_flag = absl::StrCat("--", prefix, "-tls-cert-file");
  const std::string key_flag = absl::StrCat("--", prefix, "-tls-key-file");
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        cert.empty() ? key_flag : cert_flag, " needs ",
        cert.empty() ? cert_flag : key_flag, ": give both or neither"));
  }
  if (!client_ca.empty() && cert.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", prefix, "-tls-client-ca-file needs ", cert_flag,
                     " and ", key_flag));
  }
  return absl::OkStatus();
}

// Addresses only this machine can reach.
bool IsLoopback(absl::string_view address) {
  return address == "localhost" || address == "::1" || address == "[::1]" ||
         absl::StartsWith(address, "127.");
}

using ValueSetter =
    std::function<absl::Status(const std::string& value, ServerFlags& flags)>;
using FlagMap = std::map<std::string, ValueSetter, std::less<>>;

// The flags of an HTTP port (metrics, REST): its connection limits and TLS
// files, named --<prefix>-max-connections, ..., --<prefix>-tls-cert-file.
void AddHttpPortFlags(const std::string& prefix,
                      HttpServerLimits ServerFlags::*limits,
                      std::string ServerFlags::*cert,
                      std::string ServerFlags::*key,
                      std::string ServerFlags::*client_ca, FlagMap& flags) {
  struct CountFlag {
    const char* suffix;
    const char* what;
    int min;
    int max;
    int HttpServerLimits::*field;
  };
  for (const CountFlag& count : {
           CountFlag{"max-connections", "count", 1, kMaxMetricsConnections,
                     &HttpServerLimits::max_connections},
           CountFlag{"max-connections-per-ip", "count", 0,
                     kMaxMetricsConnections,
                     &HttpServerLimits::max_connections_per_ip},
           CountFlag{"connection-timeout-seconds", "whole number of seconds", 1,
                     3600, &HttpServerLimits::connection_timeout_seconds},
           CountFlag{"request-timeout-seconds", "whole number of seconds", 1,
                     3600, &HttpServerLimits::request_timeout_seconds},
       }) {
    const std::string name = absl::StrCat(prefix, "-", count.suffix);
    flags[name] = [name, count, limits](const std::string& v, ServerFlags& f) {
      return ParseCount(name, v, count.what, count.min, count.max,
                        &((f.*limits).*(count.field)));
    };
  }
  for (const auto& [suffix, path] :
       {std::pair<const char*, std::string ServerFlags::*>{"tls-cert-file",
                                                           cert},
        {"tls-key-file", key},
        {"tls-client-ca-file", client_ca}}) {
    const std::string name = absl::StrCat(prefix, "-", suffix);
    flags[name] = [name, path = path](const std::string& v, ServerFlags& f) {
      return ParseFilePath(name, v, &(f.*path));
    };
  }
}

// Flags that take a value, by name.
const FlagMap& ValueFlags() {
  static const FlagMap* flags = [] {
    auto* flags = new FlagMap{
        {"model-repository",
         [](const std::string& v, ServerFlags& f) {
           if (v.empty()) {
             return absl::InvalidArgumentError(
                 "--model-repository: empty path");
           }
           f.model_repository = v;
           return absl::OkStatus();
         }},
        {"grpc-port",
         [](const std::string& v, ServerFlags& f) {
           return ParsePort("grpc-port", v, &f.grpc_port);
         }},
        {"metrics-port",
         [](const std::string& v, ServerFlags& f) {
           return ParsePort("metrics-port", v, &f.metrics_port);
         }},
        {"http-port",
         [](const std::string& v, ServerFlags& f) {
           if (v == "off") {
             f.http_port.reset();
             return absl::OkStatus();
           }
           int port = 0;
           if (absl::Status status = ParsePort("http-port", v, &port);
               !status.ok()) {
             return absl::InvalidArgumentError(
                 absl::StrCat(status.message(), " or off"));
           }
           f.http_port = port;
           return absl::OkStatus();
         }},
        {"bind-address",
         [](const std::string& v, ServerFlags& f) {
           if (v.empty()) {
             return absl::InvalidArgumentError("--bind-address: empty address");
           }
           f.bind_address = v;
           return absl::OkStatus();
         }},
        {"grpc-tls-cert-file",
         [](const std::string& v, ServerFlags& f) {
           return ParseFilePath("grpc-tls-cert-file", v, &f.grpc_tls_cert_file);
         }},
        {"grpc-tls-key-file",
         [](const std::string& v, ServerFlags& f) {
           return ParseFilePath("grpc-tls-key-file", v, &f.grpc_tls_key_file);
         }},
        {"grpc-tls-client-ca-file",
         [](const std::string& v, ServerFlags& f) {
           return ParseFilePath("grpc-tls-client-ca-file", v,
                                &f.grpc_tls_client_ca_file);
         }},
        {"auth-token-file",
         [](const std::string& v, ServerFlags& f) {
           return ParseFilePath("auth-token-file", v, &f.auth_token_file);
         }},
        {"log-level",
         [](const std::string& v, ServerFlags& f) {
           absl::StatusOr<LogLevel> level = ParseLogLevel(v);
           if (!level.ok()) {
             return absl::InvalidArgumentError(
                 absl::StrCat("--log-level: ", level.status().message()));
           }
           f.log_level = *level;
           return absl::OkStatus();
         }},
        {"memory-budget-bytes",
         [](const std::string& v, ServerFlags& f) {
           return ParseBytes("memory-budget-bytes", v, 0,
                             std::numeric_limits<int64_t>::max(),
                             &f.memory_budget_bytes);
         }},
        {"keep-alive",
         [](const std::string& v, ServerFlags& f) {
           absl::Duration keep_alive;
           if (!absl::ParseDuration(v, &keep_alive) ||
               keep_alive < absl::ZeroDuration()) {
             return absl::InvalidArgumentError(absl::StrCat(
                 "--keep-alive: '", v,
                 "' is not a duration >= 0 (for example 30s, 5m, inf)"));
           }
           f.keep_alive = keep_alive;
           return absl::OkStatus();
         }},
        {"max-message-bytes",
         [](const std::string& v, ServerFlags& f) {
           // gRPC takes the limit as an int.
           return ParseBytes("max-message-bytes", v, 1024,
                             std::numeric_limits<int32_t>::max(),
                             &f.max_message_bytes);
         }},
        {"intra-op-threads",
         [](const std::string& v, ServerFlags& f) {
           return ParseCount("intra-op-threads", v, "thread count", 0,
                             kMaxThreads, &f.intra_op_threads);
         }},
        {"inter-op-threads",
         [](const std::string& v, ServerFlags& f) {
           return ParseCount("inter-op-threads", v, "thread count", 0,
                             kMaxThreads, &f.inter_op_threads);
         }},
        {"cpu-f32-matmul",
         [](const std::string& v, ServerFlags& f) -> absl::Status {
           absl::StatusOr<models::F32MatmulKernel> kernel =
               models::ParseF32MatmulKernel(v);
           if (!kernel.ok()) {
             return absl::InvalidArgumentError(
                 absl::StrCat("--cpu-f32-matmul: ", kernel.status().message()));
           }
           f.cpu_f32_matmul = *kernel;
           return absl::OkStatus();
         }},
        {"max-instances-per-model",
         [](const std::string& v, ServerFlags& f) {
           return ParseCount("max-instances-per-model", v, "count", 1,
                             kMaxThreads, &f.max_instances_per_model);
         }},
        {"max-warmup-seconds",
         [](const std::string& v, ServerFlags& f) {
           double seconds = 0;
           if (!absl::SimpleAtod(v, &seconds) || !(seconds > 0) ||
               seconds > 86400) {
             return absl::InvalidArgumentError(absl::StrCat(
                 "--max-warmup-seconds: '", v,
                 "' is not a number of seconds above 0 and at most 86400"));
           }
           f.max_warmup_seconds = seconds;
           return absl::OkStatus();
         }},
        {"shutdown-grace-seconds",
         [](const std::string& v, ServerFlags& f) {
           double seconds = 0;
           if (!absl::SimpleAtod(v, &seconds) || !(seconds >= 0) ||
               seconds > 3600) {
             return absl::InvalidArgumentError(absl::StrCat(
                 "--shutdown-grace-seconds: '", v,
                 "' is not a number of seconds between 0 and 3600"));
           }
           f.shutdown_grace_seconds = seconds;
           return absl::OkStatus();
         }},
    };
    AddHttpPortFlags("metrics", &ServerFlags::metrics_limits,
                     &ServerFlags::metrics_tls_cert_file,
                     &ServerFlags::metrics_tls_key_file,
                     &ServerFlags::metrics_tls_client_ca_file, *flags);
    AddHttpPortFlags("http", &ServerFlags::http_limits,
                     &ServerFlags::http_tls_cert_file,
                     &ServerFlags::http_tls_key_file,
                     &ServerFlags::http_tls_client_ca_file, *flags);
    return flags;
  }();
  return *flags;
}

}  // namespace

absl::StatusOr<ServerFlags> ParseServerFlags(
    const std::vector<std::string>& args) {
  ServerFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      flags.show_help = true;
      continue;
    }
    if (arg == "--version") {
      flags.show_version = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (see --help)"));
    }
    const size_t eq = arg.find('=');
    const std::string name =
        arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    if (auto on = SwitchFlags().find(name); on != SwitchFlags().end()) {
      const std::string value =
          eq == std::string::npos ? "true" : arg.substr(eq + 1);
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": '", value, "' is not true or false"));
      }
      flags.*(on->second) = value == "true";
      continue;
    }
    auto it = ValueFlags().find(name);
    if (it == ValueFlags().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '--", name, "' (see --help)"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": missing value"));
    }
    if (absl::Status status = it->second(value, flags); !status.ok()) {
      return status;
    }
  }
  for (absl::Status status :
       {CheckTlsFiles("metrics", flags.metrics_tls_cert_file,
                      flags.metrics_tls_key_file,
                      flags.metrics_tls_client_ca_file),
        CheckTlsFiles("grpc", flags.grpc_tls_cert_file, flags.grpc_tls_key_file,
                      flags.grpc_tls_client_ca_file),
        CheckTlsFiles("http", flags.http_tls_cert_file, flags.http_tls_key_file,
                      flags.http_tls_client_ca_file)}) {
    if (!status.ok()) return status;
  }
  if (!flags.bind_address.empty() && !IsLoopback(flags.bind_address) &&
      !AuthenticationConfigured(flags) &&
      !flags.allow_unauthenticated_remote_access) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bind-address=", flags.bind_address,
        " serves other machines, but no authentication is configured: give "
        "--auth-token-file, or --grpc-tls-client-ca-file with "
        "--http-tls-client-ca-file (or --http-port=off), or "
        "--allow-unauthenticated-remote-access to serve without it"));
  }
  if (!flags.show_help && !flags.show_version &&
      flags.model_repository.empty()) {
    return absl::InvalidArgumentError(
        "--model-repository is required (see --help)");
  }
  return flags;
}

bool AuthenticationConfigured(const ServerFlags& flags) {
  return !flags.auth_token_file.empty() ||
         (!flags.grpc_tls_client_ca_file.empty() &&
          (!flags.http_port.has_value() ||
           !flags.http_tls_client_ca_file.empty()));
}

std::string BindAddress(const ServerFlags& flags) {
  if (!flags.bind_address.empty()) return flags.bind_address;
  return AuthenticationConfigured(flags) ? "0.0.0.0" : "127.0.0.1";
}

std::string ServerUsage() {
  return R"(Usage: castserve --model-repository=PATH [flags]

Serves PyTorch models over the KServe v2 / Open Inference Protocol (gRPC
and REST).

Flags:
  --model-repository=PATH       model repository: one folder per model, each
                                with a config.pbtxt (required)
  --grpc-port=PORT              gRPC port (default 8001; 0 picks a free one)
  --http-port=PORT|off          KServe v2 REST port (default 8000; 0 picks a
                                free one; off: no REST port)
  --http-max-connections=N      as --metrics-max-connections, for the REST
                                port (default 256)
  --http-max-connections-per-ip=N
                                as --metrics-max-connections-per-ip (32)
  --http-connection-timeout-seconds=S
                                as --metrics-connection-timeout-seconds (10)
  --http-request-timeout-seconds=S
                                a REST request must arrive, and its answer
                                leave, within this (default 30); the time an
                                inference takes does not count
  --http-tls-cert-file=PEM      serve the REST port over HTTPS with this
                                certificate (chain); needs the key file
  --http-tls-key-file=PEM       the certificate's unencrypted private key
  --http-tls-client-ca-file=PEM require client certificates signed by these
                                CA certificates on the REST port
  --metrics-port=PORT           Prometheus /metrics and HTTP health port
                                (default 8002; 0 picks a free one)
  --metrics-max-connections=N   connections the metrics port holds at once
                                (default 256)
  --metrics-max-connections-per-ip=N
                                connections one client address may hold on
                                the metrics port; more are closed at once
                                (default 32; 0: no per-address limit)
  --metrics-connection-timeout-seconds=S
                                a metrics-port connection idle this long is
                                closed (default 10)
  --metrics-request-timeout-seconds=S
                                a metrics-port request must arrive and be
                                answered within this of the connection's
                                start or its previous answer (default 30)
  --metrics-tls-cert-file=PEM   serve the metrics port over HTTPS with this
                                certificate (chain); needs the key file
  --metrics-tls-key-file=PEM    the certificate's unencrypted private key
  --metrics-tls-client-ca-file=PEM
                                require client certificates signed by these
                                CA certificates on the metrics port (needs the
                                certificate and key files)
  --bind-address=ADDR           address the listeners bind to (default:
                                0.0.0.0 with authentication, 127.0.0.1
                                without; another address without
                                authentication needs
                                --allow-unauthenticated-remote-access)
  --auth-token-file=PATH        bearer tokens with scopes, one per line:
                                "<token> infer,admin,metrics [expires=TIME]";
                                re-read when it changes
  --grpc-tls-cert-file=PEM      TLS on the gRPC port: certificate chain and
  --grpc-tls-key-file=PEM       key (both or neither); reloaded when changed
  --grpc-tls-client-ca-file=PEM require client certificates signed by this CA
  --allow-unauthenticated-remote-access
                                serve on a non-loopback address without
                                authentication
  --log-level=LEVEL             debug, info, warning or error (default info)
  --memory-budget-bytes=N       memory models may use together (KiB/MiB/GiB
                                suffixes allowed); past it the least recently
                                used idle model is demoted a memory tier,
                                then unloaded (default 0: none)
  --memory-tiers=BOOL           demote idle models (hot, warm, cool) under
                                memory pressure and keep_alive before
                                unloading any (default true; false: unload
                                only)
  --keep-alive=DURATION         idleness after which a model is demoted one
                                tier, and one more after each further period
                                (30s, 5m, ...; default inf: never); a model's
                                tiers.keep_alive wins
  --max-message-bytes=N         largest gRPC message accepted or sent and
                                largest REST request body; larger requests
                                fail with RESOURCE_EXHAUSTED (gRPC) or 413
                                (REST) (default 256MiB)
  --intra-op-threads=N          LibTorch threads each model instance runs one
                                forward on (default 0: the cores divided by
                                the model's instance count, at least 1; a
                                model's INTRA_OP_THREAD_COUNT parameter wins)
  --inter-op-threads=N          LibTorch's inter-op pool (default 0: its own)
  --cpu-f32-matmul=KERNEL       f32 layer products on the CPU: auto (default:
                                measure LibTorch's BLAS and oneDNN once at
                                start, use the faster), blas or onednn
  --max-instances-per-model=N   most instances a model config may ask for
                                (default 16)
  --max-warmup-seconds=S        how long a model's warmups may run before its
                                load fails (default 300); a warmup request's
                                inputs are bounded by --max-message-bytes
  --allow-symlinks-outside-repository
                                let model folders, config.pbtxt, checkpoint
                                files and warmup files be symlinks that lead
                                outside the repository (default: refused)
  --shutdown-grace-seconds=S    on SIGTERM/SIGINT, how long in-flight calls may
                                finish before they are cancelled (default 10);
                                the process exits at most 5 s after that
  --version                     print the version and exit
  --help                        print this help and exit
)";
}

}  // namespace castserve
