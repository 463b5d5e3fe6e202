// castserve: the model-serving daemon's entry point. Parses flags, starts the
// server, and waits for SIGTERM/SIGINT to drain and exit 0.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "casting/memory/malloc_settings.h"
#include "models/cancellation.h"
#include "models/kernels/matmul.h"
#include "platform/executor.h"
#include "server/core/auth.h"
#include "server/libtorch_version.h"
#include "server/log.h"
#include "server/pem_file.h"
#include "server/server.h"
#include "server/server_flags.h"
#include "server/version.h"

namespace castserve {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;
// How long past the grace period a shutdown may take before the process
// exits anyway: cancelled forwards stop at their next module, which takes
// milliseconds, but one LibTorch kernel or a read from a slow disk cannot
// be interrupted.
constexpr absl::Duration kShutdownOverrun = absl::Seconds(5);

// Blocks SIGTERM and SIGINT in this thread and every thread started after
// it, so that only WaitForStopSignal sees them.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int WaitForStopSignal(const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  return signal_number;
}

// Reads the PEM file a flag names into `*pem` (may be null: only checked);
// OK when the flag was not given.
absl::Status ReadPemFlag(const char* flag, const std::string& path,
                         PemKind kind, std::string* pem) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> text = ReadPemFile(flag, path, kind);
  if (!text.ok()) return text.status();
  if (pem != nullptr) *pem = *std::move(text);
  return absl::OkStatus();
}

// An HTTP port's limits, and its TLS credentials read from the files the
// flags --<prefix>-tls-* name. InvalidArgument naming the flag and the file
// when one cannot be used.
absl::StatusOr<HttpServerOptions> HttpOptions(const std::string& prefix,
                                              const HttpServerLimits& limits,
                                              const std::string& cert_file,
                                              const std::string& key_file,
                                              const std::string& ca_file) {
  HttpServerOptions http;
  http.limits = limits;
  if (cert_file.empty()) return http;
  HttpTlsCredentials& tls = http.tls.emplace();
  const std::string flag = "--" + prefix + "-tls-";
  for (absl::Status status :
       {ReadPemFlag((flag + "cert-file").c_str(), cert_file,
                    PemKind::kCertificate, &tls.certificate_pem),
        ReadPemFlag((flag + "key-file").c_str(), key_file, PemKind::kPrivateKey,
                    &tls.private_key_pem),
        ReadPemFlag((flag + "client-ca-file").c_str(), ca_file,
                    PemKind::kCertificate, &tls.client_ca_pem)}) {
    if (!status.ok()) return status;
  }
  return http;
}

// The signal thread. A stop signal during startup cancels the loads at once
// (nothing is served yet); afterwards Shutdown gives in-flight calls their
// grace. Either way the process ends within the grace period plus
// kShutdownOverrun of the signal, or exits 1. Destroying the watcher ends
// the thread, also when no signal came (a failed start).
class StopSignalWatcher {
 public:
  StopSignalWatcher(sigset_t signals, absl::Duration grace)
      : thread_(platform::Executor::Default().StartThread(
            [this, signals, grace] { Watch(signals, grace); })) {}
  ~StopSignalWatcher() {
    stopped_.Notify();
    if (!signalled_.HasBeenNotified()) kill(getpid(), SIGTERM);
    thread_->Join();
  }
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

  // Cancelled by a signal that comes before MarkStarted.
  std::shared_ptr<const models::Cancellation> stop() const { return stop_; }
  void MarkStarted() { started_ = true; }
  // Blocks until a stop signal came; returns it.
  int WaitForSignal() {
    signalled_.WaitForNotification();
    return signal_number_;
  }

 private:
  void Watch(const sigset_t& signals, absl::Duration grace) {
    signal_number_ = WaitForStopSignal(signals);
    if (!started_) {
      Log(LogLevel::kInfo, "stop signal during startup; cancelling the loads",
          {{"signal", strsignal(signal_number_)}});
      stop_->Cancel("the daemon is stopping");
    }
    signalled_.Notify();
    if (!stopped_.WaitForNotificationWithTimeout(grace + kShutdownOverrun)) {
      Log(LogLevel::kError, "shutdown overran its grace period; exiting now",
          {{"grace_seconds", absl::ToDoubleSeconds(grace)},
           {"overrun_seconds", absl::ToInt64Seconds(kShutdownOverrun)}});
      std::_Exit(kExitFailure);
    }
  }

  const std::shared_ptr<models::Cancellation> stop_ =
      std::make_shared<models::Cancellation>();
  std::atomic<bool> started_{false};
  std::atomic<int> signal_number_{0};
  absl::Notification signalled_;
  absl::Notification stopped_;
  // Last: started once the rest exists.
  const std::unique_ptr<platform::Thread> thread_;
};

// The server's options from the flags, with the files they name read and
// checked (TLS PEM files, the token file): InvalidArgument naming the flag
// and the file when one cannot be used.
absl::StatusOr<ServerOptions> OptionsFromFlags(const ServerFlags& flags) {
  ServerOptions options;
  options.model_repository = flags.model_repository;
  options.bind_address = BindAddress(flags);
  if (flags.bind_address.empty() && !AuthenticationConfigured(flags)) {
    Log(LogLevel::kInfo,
        "no authentication configured: listening on 127.0.0.1 only",
        {{"hint",
          "--auth-token-file (or client certificates on the gRPC and REST "
          "ports) to serve other machines"}});
  }
  options.grpc_port = flags.grpc_port;
  options.metrics_port = flags.metrics_port;
  options.http_port = flags.http_port;
  absl::StatusOr<HttpServerOptions> metrics_http =
      HttpOptions("metrics", flags.metrics_limits, flags.metrics_tls_cert_file,
                  flags.metrics_tls_key_file, flags.metrics_tls_client_ca_file);
  if (!metrics_http.ok()) return metrics_http.status();
  options.metrics_http = *std::move(metrics_http);
  absl::StatusOr<HttpServerOptions> http =
      HttpOptions("http", flags.http_limits, flags.http_tls_cert_file,
                  flags.http_tls_key_file, flags.http_tls_client_ca_file);
  if (!http.ok()) return http.status();
  options.http = *std::move(http);
  // gRPC reads the files itself (and again when they change); read here
  // once for errors that name the flag and the file.
  for (absl::Status status :
       {ReadPemFlag("--grpc-tls-cert-file", flags.grpc_tls_cert_file,
                    PemKind::kCertificate, nullptr),
        ReadPemFlag("--grpc-tls-key-file", flags.grpc_tls_key_file,
                    PemKind::kPrivateKey, nullptr),
        ReadPemFlag("--grpc-tls-client-ca-file", flags.grpc_tls_client_ca_file,
                    PemKind::kCertificate, nullptr)}) {
    if (!status.ok()) return status;
  }
  options.grpc_tls = {flags.grpc_tls_cert_file, flags.grpc_tls_key_file,
                      flags.grpc_tls_client_ca_file};
  if (!flags.auth_token_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
        TokenAuthenticator::Open(flags.auth_token_file);
    if (!auth.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth-token-file: ", auth.status().message()));
    }
    options.auth = *std::move(auth);
  }
  options.memory_budget_bytes = flags.memory_budget_bytes;
  options.memory_tiers = flags.memory_tiers;
  options.keep_alive = flags.keep_alive;
  options.max_message_bytes = flags.max_message_bytes;
  options.intra_op_threads = flags.intra_op_threads;
  options.inter_op_threads = flags.inter_op_threads;
  options.max_instances_per_model = flags.max_instances_per_model;
  options.max_warmup_seconds = flags.max_warmup_seconds;
  options.allow_symlinks_outside_repository =
      flags.allow_symlinks_outside_repository;
  return options;
}

// Settles the f32 layer-product kernel before any model loads (measuring
// both when asked to) and logs what it chose and why.
void ChooseF32Matmul(models::F32MatmulKernel requested) {
  models::SetF32MatmulKernel(requested);
  const models::F32MatmulChoice choice = models::ResolveF32MatmulKernel();
  if (!choice.measured) {
    Log(LogLevel::kInfo, "f32 matmul kernel",
        {{"kernel", models::F32MatmulKernelName(choice.kernel)},
         {"requested", models::F32MatmulKernelName(requested)},
         {"bf16_on_onednn", models::OneDnnRunsReducedPrecision()}});
    return;
  }
  Log(LogLevel::kInfo, "f32 matmul kernel",
      {{"kernel", models::F32MatmulKernelName(choice.kernel)},
       {"blas_us", static_cast<int64_t>(choice.blas_us)},
       {"onednn_us", static_cast<int64_t>(choice.onednn_us)},
       {"bf16_on_onednn", models::OneDnnRunsReducedPrecision()}});
}

int Run(const ServerFlags& flags) {
  casting::UseServingMallocSettings();
  SetLogLevel(flags.log_level);
  RouteGrpcLogsToCastserveLog();
  StopSignalWatcher watcher(BlockStopSignals(),
                            absl::Seconds(flags.shutdown_grace_seconds));
  Log(LogLevel::kInfo, "castserve starting",
      {{"version", kServerVersion},
       {"libtorch", LibTorchVersion()},
       {"model_repository", flags.model_repository}});
  absl::StatusOr<ServerOptions> options = OptionsFromFlags(flags);
  if (options.ok()) {
    options->stop = watcher.stop();
    ChooseF32Matmul(flags.cpu_f32_matmul);
  }
  absl::StatusOr<std::unique_ptr<Server>> server =
      options.ok() ? Server::Create(*options) : options.status();
  if (!server.ok()) {
    Log(LogLevel::kError, "castserve cannot start",
        {{"error", server.status().message()}});
    return kExitFailure;
  }
  watcher.MarkStarted();
  const int signal_number = watcher.WaitForSignal();
  Log(LogLevel::kInfo, "shutting down",
      {{"signal", strsignal(signal_number)},
       {"grace_seconds", flags.shutdown_grace_seconds}});
  (*server)->Shutdown(absl::Seconds(flags.shutdown_grace_seconds));
  server->reset();
  // Joins what the models' threads left to it (an instance that stopped
  // its own model): nothing the daemon started outlives Run.
  platform::Executor::Default().Drain();
  Log(LogLevel::kInfo, "castserve stopped");
  return 0;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  using namespace castserve;
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ServerFlags> flags = ParseServerFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "castserve: %s\n",
                 std::string(flags.status().message()).c_str());
    return kExitUsage;
  }
  if (flags->show_help) {
    std::fputs(ServerUsage().c_str(), stdout);
    return 0;
  }
  if (flags->show_version) {
    std::printf("%s %s (LibTorch %s)\n", kServerName, kServerVersion,
                LibTorchVersion().c_str());
    return 0;
  }
  return Run(*flags);
}
