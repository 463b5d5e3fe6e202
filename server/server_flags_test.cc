#include "server/server_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ServerFlags> Parse(std::vector<std::string> args) {
  return ParseServerFlags(args);
}

TEST(ServerFlagsTest, DefaultsApplyWithOnlyTheRepository) {
  absl::StatusOr<ServerFlags> flags = Parse({"--model-repository=/models"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->model_repository, "/models");
  EXPECT_EQ(flags->grpc_port, 8001);
  EXPECT_EQ(flags->metrics_port, 8002);
  EXPECT_EQ(flags->log_level, LogLevel::kInfo);
  EXPECT_FALSE(flags->show_help);
}

TEST(ServerFlagsTest, AcceptsEqualsAndSeparateValues) {
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository", "/m", "--grpc-port=9001", "--metrics-port",
             "0", "--log-level=debug", "--shutdown-grace-seconds=2.5"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->model_repository, "/m");
  EXPECT_EQ(flags->grpc_port, 9001);
  EXPECT_EQ(flags->metrics_port, 0);
  EXPECT_EQ(flags->log_level, LogLevel::kDebug);
  EXPECT_DOUBLE_EQ(flags->shutdown_grace_seconds, 2.5);
}

TEST(ServerFlagsTest, HelpAndVersionNeedNoRepository) {
  EXPECT_TRUE(Parse({"--help"})->show_help);
  EXPECT_TRUE(Parse({"--version"})->show_version);
}

TEST(ServerFlagsTest, RejectsBadInputWithTheFlagNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{}, "--model-repository is required"},
      {{"--model-repository=/m", "--frobnicate=1"},
       "unknown flag '--frobnicate'"},
      {{"--model-repository=/m", "--grpc-port=http"}, "--grpc-port: 'http'"},
      {{"--model-repository=/m", "--grpc-port=70000"}, "--grpc-port: '70000'"},
      {{"--model-repository=/m", "--metrics-port=-1"}, "--metrics-port: '-1'"},
      {{"--model-repository=/m", "--log-level=loud"}, "--log-level: unknown"},
      {{"--model-repository=/m", "--grpc-port"}, "--grpc-port: missing value"},
      {{"--model-repository="}, "--model-repository: empty path"},
      {{"--model-repository=/m", "stray"}, "unexpected argument 'stray'"},
      {{"--model-repository=/m", "--shutdown-grace-seconds=nan"},
       "--shutdown-grace-seconds"},
      {{"--model-repository=/m", "--intra-op-threads=-1"},
       "--intra-op-threads: '-1' is not a thread count between 0 and 1024"},
      {{"--model-repository=/m", "--inter-op-threads=5000"},
       "--inter-op-threads: '5000'"},
      {{"--model-repository=/m", "--max-instances-per-model=0"},
       "--max-instances-per-model: '0'"},
      {{"--model-repository=/m", "--cpu-f32-matmul=mkl"},
       "--cpu-f32-matmul: unknown f32 matmul kernel 'mkl'; expected auto, "
       "blas or onednn"},
      {{"--model-repository=/m", "--max-warmup-seconds=-3"},
       "--max-warmup-seconds: '-3'"},
      {{"--model-repository=/m", "--metrics-max-connections=0"},
       "--metrics-max-connections: '0' is not a count between 1 and 65536"},
      {{"--model-repository=/m", "--metrics-max-connections-per-ip=-1"},
       "--metrics-max-connections-per-ip: '-1'"},
      {{"--model-repository=/m", "--metrics-connection-timeout-seconds=0.5"},
       "--metrics-connection-timeout-seconds: '0.5' is not a whole number of "
       "seconds between 1 and 3600"},
      {{"--model-repository=/m", "--metrics-request-timeout-seconds=0"},
       "--metrics-request-timeout-seconds: '0'"},
      {{"--model-repository=/m", "--metrics-tls-cert-file="},
       "--metrics-tls-cert-file: empty path"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ServerFlags> flags = Parse(c.args);
    ASSERT_FALSE(flags.ok()) << c.message;
    EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(flags.status().message(), HasSubstr(c.message));
  }
}

TEST(ServerFlagsTest, MemoryTiersAreOnAndKeepAliveIsNeverByDefault) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->memory_tiers);
  EXPECT_EQ(defaults->keep_alive, absl::InfiniteDuration());
  absl::StatusOr<ServerFlags> flags = Parse(
      {"--model-repository=/r", "--memory-tiers=false", "--keep-alive=5m"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->memory_tiers);
  EXPECT_EQ(flags->keep_alive, absl::Minutes(5));
  for (const char* bad : {"--keep-alive=soon", "--keep-alive=-1s"}) {
    absl::StatusOr<ServerFlags> rejected =
        Parse({"--model-repository=/r", bad});
    ASSERT_FALSE(rejected.ok()) << bad;
    EXPECT_THAT(rejected.status().message(), HasSubstr("--keep-alive: '"))
        << bad;
  }
  EXPECT_FALSE(Parse({"--model-repository=/r", "--memory-tiers=maybe"}).ok());
}

TEST(ServerFlagsTest, ByteFlagsTakeBinarySuffixes) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->memory_budget_bytes, 0);
  EXPECT_EQ(defaults->max_message_bytes, int64_t{256} << 20);
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository=/r", "--memory-budget-bytes=2GiB",
             "--max-message-bytes", "1048576"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->memory_budget_bytes, int64_t{2} << 30);
  EXPECT_EQ(flags->max_message_bytes, 1048576);
  for (const char* bad :
       {"--max-message-bytes=3GiB", "--max-message-bytes=10",
        "--memory-budget-bytes=-1", "--memory-budget-bytes=lots"}) {
    absl::StatusOr<ServerFlags> rejected =
        Parse({"--model-repository=/r", bad});
    ASSERT_FALSE(rejected.ok()) << bad;
    EXPECT_THAT(rejected.status().message(), HasSubstr("byte count")) << bad;
  }
}

TEST(ServerFlagsTest, ThreadFlagsDefaultToTheAutomaticRule) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->intra_op_threads, 0);
  EXPECT_EQ(defaults->inter_op_threads, 0);
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository=/r", "--intra-op-threads=3",
             "--inter-op-threads=2"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->intra_op_threads, 3);
  EXPECT_EQ(flags->inter_op_threads, 2);
}

TEST(ServerFlagsTest, CpuF32MatmulDefaultsToMeasuringAndTakesAKernel) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->cpu_f32_matmul, models::F32MatmulKernel::kAuto);
  absl::StatusOr<ServerFlags> blas =
      Parse({"--model-repository=/r", "--cpu-f32-matmul=blas"});
  ASSERT_TRUE(blas.ok()) << blas.status();
  EXPECT_EQ(blas->cpu_f32_matmul, models::F32MatmulKernel::kBlas);
  absl::StatusOr<ServerFlags> onednn =
      Parse({"--model-repository=/r", "--cpu-f32-matmul", "onednn"});
  ASSERT_TRUE(onednn.ok()) << onednn.status();
  EXPECT_EQ(onednn->cpu_f32_matmul, models::F32MatmulKernel::kOneDnn);
}

TEST(ServerFlagsTest, MetricsLimitsDefaultToTheHttpServersAndAreSet) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->metrics_limits.max_connections,
            HttpServerLimits{}.max_connections);
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository=/r", "--metrics-max-connections=1000",
             "--metrics-max-connections-per-ip=0",
             "--metrics-connection-timeout-seconds", "30",
             "--metrics-request-timeout-seconds=60"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_limits.request_timeout_seconds, 60);
  EXPECT_EQ(flags->metrics_limits.max_connections, 1000);
  EXPECT_EQ(flags->metrics_limits.max_connections_per_ip, 0);
  EXPECT_EQ(flags->metrics_limits.connection_timeout_seconds, 30);
}

TEST(ServerFlagsTest, MetricsTlsFilesGoTogether) {
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository=/r", "--metrics-tls-cert-file=/c.pem",
             "--metrics-tls-key-file=/k.pem",
             "--metrics-tls-client-ca-file=/ca.pem"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->metrics_tls_cert_file, "/c.pem");
  EXPECT_EQ(flags->metrics_tls_key_file, "/k.pem");
  EXPECT_EQ(flags->metrics_tls_client_ca_file, "/ca.pem");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--metrics-tls-cert-file=/c.pem"},
       "--metrics-tls-cert-file needs --metrics-tls-key-file: give both or "
       "neither"},
      {{"--metrics-tls-key-file=/k.pem"},
       "--metrics-tls-key-file needs --metrics-tls-cert-file"},
      {{"--metrics-tls-client-ca-file=/ca.pem"},
       "--metrics-tls-client-ca-file needs --metrics-tls-cert-file and "
       "--metrics-tls-key-file"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--model-repository=/r");
    absl::StatusOr<ServerFlags> rejected = Parse(args);
    ASSERT_FALSE(rejected.ok()) << c.message;
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(rejected.status().message(), HasSubstr(c.message));
  }
}

TEST(ServerFlagsTest, WithoutAuthenticationOnlyLoopbackByDefault) {
  absl::StatusOr<ServerFlags> plain = Parse({"--model-repository=/r"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(AuthenticationConfigured(*plain));
  EXPECT_EQ(BindAddress(*plain), "127.0.0.1");
  // Tokens, or client certificates on every port that serves models.
  for (const std::vector<std::string>& auth :
       std::vector<std::vector<std::string>>{
           {"--auth-token-file=/t"},
           {"--grpc-tls-client-ca-file=/ca.pem", "--http-port=off"},
           {"--grpc-tls-client-ca-file=/ca.pem",
            "--http-tls-client-ca-file=/ca.pem", "--http-tls-cert-file=/c.pem",
            "--http-tls-key-file=/k.pem"}}) {
    std::vector<std::string> args = {"--model-repository=/r",
                                     "--grpc-tls-cert-file=/c.pem",
                                     "--grpc-tls-key-file=/k.pem"};
    args.insert(args.end(), auth.begin(), auth.end());
    absl::StatusOr<ServerFlags> flags = Parse(args);
    ASSERT_TRUE(flags.ok()) << flags.status();
    EXPECT_TRUE(AuthenticationConfigured(*flags)) << auth[0];
    EXPECT_EQ(BindAddress(*flags), "0.0.0.0") << auth[0];
  }
  // gRPC client certificates leave the REST port open.
  absl::StatusOr<ServerFlags> grpc_only =
      Parse({"--model-repository=/r", "--grpc-tls-client-ca-file=/ca.pem",
             "--grpc-tls-cert-file=/c.pem", "--grpc-tls-key-file=/k.pem"});
  ASSERT_TRUE(grpc_only.ok()) << grpc_only.status();
  EXPECT_FALSE(AuthenticationConfigured(*grpc_only));
  EXPECT_EQ(BindAddress(*grpc_only), "127.0.0.1");
  for (const char* loopback : {"127.0.0.1", "127.0.0.2", "localhost", "::1"}) {
    absl::StatusOr<ServerFlags> flags = Parse(
        {"--model-repository=/r", std::string("--bind-address=") + loopback});
    ASSERT_TRUE(flags.ok()) << loopback << ": " << flags.status();
    EXPECT_EQ(BindAddress(*flags), loopback);
  }
  absl::StatusOr<ServerFlags> open =
      Parse({"--model-repository=/r", "--bind-address=0.0.0.0"});
  ASSERT_FALSE(open.ok());
  EXPECT_THAT(open.status().message(),
              HasSubstr("--bind-address=0.0.0.0 serves other machines, but "
                        "no authentication is configured"));
  absl::StatusOr<ServerFlags> allowed =
      Parse({"--model-repository=/r", "--bind-address=0.0.0.0",
             "--allow-unauthenticated-remote-access"});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(BindAddress(*allowed), "0.0.0.0");
}

TEST(ServerFlagsTest, SwitchesTakeNoValueOrTrueOrFalse) {
  absl::StatusOr<ServerFlags> flags =
      Parse({"--model-repository=/r", "--allow-symlinks-outside-repository"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(flags->allow_symlinks_outside_repository);
  flags = Parse(
      {"--model-repository=/r", "--allow-symlinks-outside-repository=false"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->allow_symlinks_outside_repository);
  absl::StatusOr<ServerFlags> bad = Parse(
      {"--model-repository=/r", "--allow-symlinks-outside-repository=yes"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("--allow-symlinks-outside-repository: 'yes' is not "
                        "true or false"));
}

TEST(ServerFlagsTest, GrpcTlsFilesGoTogether) {
  for (const auto& [arg, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--grpc-tls-cert-file=/c.pem",
            "--grpc-tls-cert-file needs --grpc-tls-key-file"},
           {"--grpc-tls-key-file=/k.pem",
            "--grpc-tls-key-file needs --grpc-tls-cert-file"},
           {"--grpc-tls-client-ca-file=/ca.pem",
            "--grpc-tls-client-ca-file needs --grpc-tls-cert-file"}}) {
    absl::StatusOr<ServerFlags> rejected =
        Parse({"--model-repository=/r", arg});
    ASSERT_FALSE(rejected.ok()) << arg;
    EXPECT_THAT(rejected.status().message(), HasSubstr(message));
  }
}

TEST(ServerFlagsTest, HttpPortIsOnByDefaultAndCanBeTurnedOff) {
  absl::StatusOr<ServerFlags> defaults = Parse({"--model-repository=/r"});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->http_port, 8000);
  EXPECT_EQ(defaults->http_limits.max_connections, 256);
  absl::StatusOr<ServerFlags> off =
      Parse({"--model-repository=/r", "--http-port=off"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->http_port.has_value());
  absl::StatusOr<ServerFlags> flags = Parse(
      {"--model-repository=/r", "--http-port", "0", "--http-max-connections=10",
       "--http-max-connections-per-ip=0", "--http-connection-timeout-seconds=5",
       "--http-request-timeout-seconds=60", "--http-tls-cert-file=/c.pem",
       "--http-tls-key-file=/k.pem", "--http-tls-client-ca-file=/ca.pem"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->http_port, 0);
  EXPECT_EQ(flags->http_limits.max_connections, 10);
  EXPECT_EQ(flags->http_limits.max_connections_per_ip, 0);
  EXPECT_EQ(flags->http_limits.connection_timeout_seconds, 5);
  EXPECT_EQ(flags->http_limits.request_timeout_seconds, 60);
  EXPECT_EQ(flags->http_tls_cert_file, "/c.pem");
  EXPECT_EQ(flags->http_tls_key_file, "/k.pem");
  EXPECT_EQ(flags->http_tls_client_ca_file, "/ca.pem");
  // The metrics port's limits stay its own.
  EXPECT_EQ(flags->metrics_limits.max_connections, 256);
}

TEST(ServerFlagsTest, BadHttpFlagsNameTheFlag) {
  for (const auto& [arg, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--http-port=on",
            "--http-port: 'on' is not a port number "
            "(0-65535) or off"},
           {"--http-port=70000", "--http-port: '70000'"},
           {"--http-max-connections=0",
            "--http-max-connections: '0' is not a count between 1 and 65536"},
           {"--http-request-timeout-seconds=0",
            "--http-request-timeout-seconds: '0'"},
           {"--http-tls-cert-file=/c.pem",
            "--http-tls-cert-file needs --http-tls-key-file"},
           {"--http-tls-client-ca-file=/ca.pem",
            "--http-tls-client-ca-file needs --http-tls-cert-file"}}) {
    absl::StatusOr<ServerFlags> rejected =
        Parse({"--model-repository=/r", arg});
    ASSERT_FALSE(rejected.ok()) << arg;
    EXPECT_THAT(rejected.status().message(), HasSubstr(message)) << arg;
  }
}

TEST(ServerFlagsTest, UsageListsEveryFlag) {
  for (const char* flag : {"--model-repository",
                           "--grpc-port",
                           "--metrics-port",
                           "--log-level",
                           "--version",
                           "--help",
                           "--shutdown-grace-seconds",
                           "--bind-address",
                           "--memory-budget-bytes",
                           "--max-message-bytes",
                           "--intra-op-threads",
                           "--inter-op-threads",
                           "--max-instances-per-model",
                           "--max-warmup-seconds",
                           "--metrics-max-connections",
                           "--metrics-max-connections-per-ip",
                           "--metrics-connection-timeout-seconds",
                           "--metrics-tls-cert-file",
                           "--metrics-tls-key-file",
                           "--metrics-tls-client-ca-file",
                           "--grpc-tls-cert-file",
                           "--grpc-tls-key-file",
                           "--grpc-tls-client-ca-file",
                           "--http-port",
                           "--http-max-connections",
                           "--http-max-connections-per-ip",
                           "--http-connection-timeout-seconds",
                           "--http-request-timeout-seconds",
                           "--http-tls-cert-file",
                           "--http-tls-key-file",
                           "--http-tls-client-ca-file",
                           "--auth-token-file",
                           "--allow-unauthenticated-remote-access",
                           "--allow-symlinks-outside-repository"}) {
    EXPECT_THAT(ServerUsage(), HasSubstr(flag));
  }
}

}  // namespace
}  // namespace castserve
