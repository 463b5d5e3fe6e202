// castserve-client: a command-line client for castserve's gRPC API.
//
//   castserve-client [--url=host:port] [--timeout-seconds=S] COMMAND
//
// Exit status: 0 when the command succeeded and the answer is positive (live,
// ready, SERVING), 1 when the server answered negatively or the call failed,
// 2 for bad usage.

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "client/inference_client.h"

namespace castserve {
namespace {

constexpr int kExitNegative = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    R"(Usage: castserve-client [--url=HOST:PORT] [--timeout-seconds=S] COMMAND

Commands:
  live       ServerLive: is the server process answering?
  ready      ServerReady: does the server take requests?
  metadata   ServerMetadata: name, version and protocol extensions
  health     grpc.health.v1 Check of the whole server

Flags:
  --url=HOST:PORT       server address (default localhost:8001)
  --timeout-seconds=S   deadline for the call (default 5)
  --help                print this help
)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "castserve-client: %s\n", status.ToString().c_str());
  return kExitNegative;
}

int PrintBool(const char* what, const absl::StatusOr<bool>& answer) {
  if (!answer.ok()) return Fail(answer.status());
  std::printf("%s: %s\n", what, *answer ? "true" : "false");
  return *answer ? 0 : kExitNegative;
}

int Metadata(InferenceClient& client) {
  absl::StatusOr<inference::ServerMetadataResponse> metadata =
      client.ServerMetadata();
  if (!metadata.ok()) return Fail(metadata.status());
  std::printf("name: %s\nversion: %s\nextensions: %s\n",
              metadata->name().c_str(), metadata->version().c_str(),
              absl::StrJoin(metadata->extensions(), " ").c_str());
  return 0;
}

int Health(InferenceClient& client) {
  auto status = client.Health("");
  if (!status.ok()) return Fail(status.status());
  std::printf("health: %s\n",
              grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status)
                  .c_str());
  return *status == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : kExitNegative;
}

int Usage(const std::string& problem) {
  std::fprintf(stderr, "castserve-client: %s (see --help)\n", problem.c_str());
  return kExitUsage;
}

int Main(const std::vector<std::string>& args) {
  std::string url = "localhost:8001";
  double timeout_seconds = 5;
  std::vector<std::string> commands;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg.rfind("--url=", 0) == 0) {
      url = arg.substr(6);
      if (url.empty()) return Usage("--url: empty address");
    } else if (arg.rfind("--timeout-seconds=", 0) == 0) {
      if (!absl::SimpleAtod(arg.substr(18), &timeout_seconds) ||
          !(timeout_seconds > 0)) {
        return Usage("--timeout-seconds: '" + arg.substr(18) +
                     "' is not a positive number");
      }
    } else if (arg.rfind("--", 0) == 0) {
      return Usage("unknown flag '" + arg + "'");
    } else {
      commands.push_back(arg);
    }
  }
  if (commands.size() != 1) return Usage("expected exactly one command");

  InferenceClient client(url, absl::Seconds(timeout_seconds));
  const std::map<std::string, std::function<int()>> handlers = {
      {"live", [&] { return PrintBool("live", client.ServerLive()); }},
      {"ready", [&] { return PrintBool("ready", client.ServerReady()); }},
      {"metadata", [&] { return Metadata(client); }},
      {"health", [&] { return Health(client); }},
  };
  auto it = handlers.find(commands[0]);
  if (it == handlers.end()) {
    return Usage("unknown command '" + commands[0] + "'");
  }
  return it->second();
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  return castserve::Main(std::vector<std::string>(argv + 1, argv + argc));
}
