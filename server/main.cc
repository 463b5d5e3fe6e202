// castserve: the model-serving daemon's entry point. Parses flags, starts the
// server, and waits for SIGTERM/SIGINT to drain and exit 0.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "casting/malloc_settings.h"
#include "models/cancellation.h"
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

// The metrics port's limits, and its TLS credentials read from the files
// the flags name. InvalidArgument naming the flag and the file when one
// cannot be used.
absl::StatusOr<HttpServerOptions> MetricsHttpOptions(const ServerFlags& flags) {
  HttpServerOptions http;
  http.limits = flags.metrics_limits;
  if (flags.metrics_tls_cert_file.empty()) return http;
  HttpTlsCredentials& tls = http.tls.emplace();
  const struct {
    const char* flag;
    const std::string& path;
    PemKind kind;
    std::string* pem;
  } files[] = {
      {"--metrics-tls-cert-file", flags.metrics_tls_cert_file,
       PemKind::kCertificate, &tls.certificate_pem},
      {"--metrics-tls-key-file", flags.metrics_tls_key_file,
       PemKind::kPrivateKey, &tls.private_key_pem},
      {"--metrics-tls-client-ca-file", flags.metrics_tls_client_ca_file,
       PemKind::kCertificate, &tls.client_ca_pem},
  };
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> pem =
        ReadPemFile(file.flag, file.path, file.kind);
    if (!pem.ok()) return pem.status();
    *file.pem = *std::move(pem);
  }
  return http;
}

int Run(const ServerFlags& flags) {
  casting::UseServingMallocSettings();
  SetLogLevel(flags.log_level);
  RouteGrpcLogsToCastserveLog();
  const sigset_t stop_signals = BlockStopSignals();
  // The signal thread: a stop signal during startup cancels the loads at
  // once (nothing is served yet); afterwards Shutdown gives in-flight calls
  // their grace. Either way the process ends within the grace period plus
  // kShutdownOverrun of the signal.
  auto stop = std::make_shared<models::Cancellation>();
  std::atomic<bool> started{false};
  std::atomic<int> signal_number{0};
  absl::Notification signalled;
  absl::Notification stopped;
  const absl::Duration grace = absl::Seconds(flags.shutdown_grace_seconds);
  std::thread signal_thread([&] {
    signal_number = WaitForStopSignal(stop_signals);
    if (!started) {
      Log(LogLevel::kInfo, "stop signal during startup; cancelling the loads",
          {{"signal", strsignal(signal_number)}});
      stop->Cancel("the daemon is stopping");
    }
    signalled.Notify();
    if (!stopped.WaitForNotificationWithTimeout(grace + kShutdownOverrun)) {
      Log(LogLevel::kError, "shutdown overran its grace period; exiting now",
          {{"grace_seconds", flags.shutdown_grace_seconds},
           {"overrun_seconds", absl::ToInt64Seconds(kShutdownOverrun)}});
      std::_Exit(kExitFailure);
    }
  });
  // Ends the signal thread when no signal came (a failed start).
  auto finish = [&](int exit_code) {
    stopped.Notify();
    if (!signalled.HasBeenNotified()) kill(getpid(), SIGTERM);
    signal_thread.join();
    return exit_code;
  };
  Log(LogLevel::kInfo, "castserve starting",
      {{"version", kServerVersion},
       {"libtorch", LibTorchVersion()},
       {"model_repository", flags.model_repository}});

  ServerOptions options;
  options.model_repository = flags.model_repository;
  options.bind_address = flags.bind_address;
  options.grpc_port = flags.grpc_port;
  options.metrics_port = flags.metrics_port;
  absl::StatusOr<HttpServerOptions> metrics_http = MetricsHttpOptions(flags);
  if (!metrics_http.ok()) {
    Log(LogLevel::kError, "castserve cannot start",
        {{"error", metrics_http.status().message()}});
    return finish(kExitFailure);
  }
  options.metrics_http = *std::move(metrics_http);
  options.memory_budget_bytes = flags.memory_budget_bytes;
  options.max_message_bytes = flags.max_message_bytes;
  options.intra_op_threads = flags.intra_op_threads;
  options.inter_op_threads = flags.inter_op_threads;
  options.max_instances_per_model = flags.max_instances_per_model;
  options.max_warmup_seconds = flags.max_warmup_seconds;
  options.allow_symlinks_outside_repository =
      flags.allow_symlinks_outside_repository;
  options.stop = stop;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(options);
  if (!server.ok()) {
    Log(LogLevel::kError, "castserve cannot start",
        {{"error", server.status().message()}});
    return finish(kExitFailure);
  }
  started = true;

  signalled.WaitForNotification();
  Log(LogLevel::kInfo, "shutting down",
      {{"signal", strsignal(signal_number)},
       {"grace_seconds", flags.shutdown_grace_seconds}});
  (*server)->Shutdown(grace);
  server->reset();
  Log(LogLevel::kInfo, "castserve stopped");
  return finish(0);
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
