// castserve-client: a command-line client for castserve's gRPC API.
//
//   castserve-client [--url=host:port] [--timeout-seconds=S] COMMAND [ARGS]
//
// Exit status: 0 when the command succeeded and the answer is positive (live,
// ready, SERVING), 1 when the server answered negatively or the call failed,
// 2 for bad usage.

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/generate_io.h"
#include "client/inference_client.h"
#include "client/tensor_io.h"

namespace castserve {
namespace {

constexpr int kExitNegative = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    R"(Usage: castserve-client [--url=HOST:PORT] [--timeout-seconds=S] COMMAND [ARGS]

Commands:
  live              ServerLive: is the server process answering?
  ready             ServerReady: does the server take requests?
  metadata [MODEL]  ServerMetadata, or ModelMetadata of MODEL (JSON)
  health            grpc.health.v1 Check of the whole server
  config MODEL      ModelConfig of MODEL (JSON)
  infer MODEL --inputs=SOURCE[,SOURCE...] [--outputs=NAME,...]
                    [--output-dir=DIR] [--id=ID]
                    ModelInfer. A SOURCE is FILE.json (input names mapped to
                    {"datatype": "INT64", "shape": [1, 3], "data": [...]}),
                    FILE.safetensors (every tensor, by name) or NAME=FILE.npy.
                    Outputs are printed as JSON, or saved as DIR/NAME.npy.
  generate MODEL (--text=STR | --ids=1,2,3) [--stream] [--param=KEY=VALUE ...]
                    Generates with a generation model: prints the new text
                    (or ids), then the finish reason on stderr. --stream uses
                    ModelStreamInfer and prints each piece as it arrives.
                    --param sets a request parameter (max_tokens=32,
                    temperature=0.7, stop=["\n"], ...); true/false become
                    booleans, numbers numbers, the rest strings.
  load MODEL [--config-json=FILE]
                    RepositoryModelLoad, with FILE's ModelConfig (JSON)
                    instead of the model's config.pbtxt when given
  unload MODEL      RepositoryModelUnload
  index             RepositoryIndex: every model with its state (JSON)
  stats [MODEL]     ModelStatistics of MODEL or every loaded model (JSON)

Flags:
  --url=HOST:PORT       server address (default localhost:8001)
  --timeout-seconds=S   deadline for the call (default 5)
  --help                print this help
)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "castserve-client: %s\n", status.ToString().c_str());
  return kExitNegative;
}

int Usage(const std::string& problem) {
  std::fprintf(stderr, "castserve-client: %s (see --help)\n", problem.c_str());
  return kExitUsage;
}

int PrintBool(const char* what, const absl::StatusOr<bool>& answer) {
  if (!answer.ok()) return Fail(answer.status());
  std::printf("%s: %s\n", what, *answer ? "true" : "false");
  return *answer ? 0 : kExitNegative;
}

// Prints a response message as JSON with the proto's field names.
template <typename Message>
int PrintJson(const absl::StatusOr<Message>& message) {
  if (!message.ok()) return Fail(message.status());
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(*message, &json, options);
  if (!status.ok()) {
    return Fail(absl::InternalError(status.message().as_string()));
  }
  std::printf("%s\n", json.c_str());
  return 0;
}

int ServerMetadata(InferenceClient& client) {
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

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError("cannot read " + path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) return absl::PermissionDeniedError("cannot write " + path);
  return absl::OkStatus();
}

// The command's own flags ("--name=value") and positional arguments.
struct CommandArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  // generate's: every --param=KEY=VALUE, in order, and --stream.
  std::vector<std::string> parameters;
  bool stream = false;
};

// One source of inputs: FILE.json, FILE.safetensors or NAME=FILE.npy.
absl::Status AddInputs(const std::string& source,
                       inference::ModelInferRequest* request) {
  const size_t eq = source.find('=');
  const std::string path =
      eq == std::string::npos ? source : source.substr(eq + 1);
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  if (eq != std::string::npos) {
    return AddInputFromNpy(source.substr(0, eq), *bytes, request);
  }
  if (absl::EndsWith(path, ".safetensors")) {
    return AddInputsFromSafetensors(*bytes, request);
  }
  return AddInputsFromJson(*bytes, request);
}

int Infer(InferenceClient& client, const CommandArgs& args) {
  auto inputs_path = args.flags.find("inputs");
  if (args.positional.size() != 2 || inputs_path == args.flags.end()) {
    return Usage("infer needs MODEL and --inputs=SOURCE[,SOURCE...]");
  }
  inference::ModelInferRequest request;
  request.set_model_name(args.positional[1]);
  if (auto id = args.flags.find("id"); id != args.flags.end()) {
    request.set_id(id->second);
  }
  if (auto outputs = args.flags.find("outputs"); outputs != args.flags.end()) {
    for (absl::string_view name :
         absl::StrSplit(outputs->second, ',', absl::SkipEmpty())) {
      request.add_outputs()->set_name(std::string(name));
    }
  }
  for (absl::string_view source :
       absl::StrSplit(inputs_path->second, ',', absl::SkipEmpty())) {
    if (absl::Status status = AddInputs(std::string(source), &request);
        !status.ok()) {
      return Fail(status);
    }
  }
  absl::StatusOr<inference::ModelInferResponse> response =
      client.ModelInfer(request);
  if (!response.ok()) return Fail(response.status());
  auto output_dir = args.flags.find("output-dir");
  if (output_dir == args.flags.end()) {
    absl::StatusOr<std::string> outputs = OutputsToJson(*response);
    if (!outputs.ok()) return Fail(outputs.status());
    std::printf("%s\n", outputs->c_str());
    return 0;
  }
  for (int i = 0; i < response->outputs_size(); ++i) {
    absl::StatusOr<std::string> npy = OutputToNpy(*response, i);
    if (!npy.ok()) return Fail(npy.status());
    const std::string path =
        output_dir->second + "/" + response->outputs(i).name() + ".npy";
    if (absl::Status status = WriteFile(path, *npy); !status.ok()) {
      return Fail(status);
    }
    std::printf("%s\n", path.c_str());
  }
  return 0;
}

// The positional argument `index`, or "" when absent.
std::string Arg(const CommandArgs& args, size_t index) {
  return index < args.positional.size() ? args.positional[index] : "";
}

// Prints `response`'s piece to stdout at once; remembers its finish
// reason.
absl::Status PrintPiece(const inference::ModelInferResponse& response,
                        bool continued, std::string* finish_reason) {
  absl::StatusOr<GeneratedPiece> piece = ReadGeneratedPiece(response);
  if (!piece.ok()) return piece.status();
  std::fputs(PieceText(*piece, continued).c_str(), stdout);
  std::fflush(stdout);
  if (!piece->finish_reason.empty()) *finish_reason = piece->finish_reason;
  return absl::OkStatus();
}

int Generate(InferenceClient& client, const CommandArgs& args) {
  GenerateArgs generate;
  generate.model = Arg(args, 1);
  if (auto text = args.flags.find("text"); text != args.flags.end()) {
    generate.text = text->second;
  }
  if (auto ids = args.flags.find("ids"); ids != args.flags.end()) {
    absl::StatusOr<std::vector<int64_t>> parsed = ParseIds(ids->second);
    if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
    generate.ids = *std::move(parsed);
  }
  generate.parameters = args.parameters;
  if (args.positional.size() != 2) return Usage("generate needs MODEL");
  absl::StatusOr<inference::ModelInferRequest> request =
      BuildGenerateRequest(generate);
  if (!request.ok()) return Usage(std::string(request.status().message()));
  std::string finish_reason;
  absl::Status status;
  // Whether a piece went to stdout (its line is ended then).
  bool continued = false;
  if (args.stream) {
    status = client.ModelStreamInfer(
        *request, [&](const inference::ModelInferResponse& response) {
          if (status.ok()) {
            status = PrintPiece(response, continued, &finish_reason);
          }
          continued = true;
        });
  } else {
    absl::StatusOr<inference::ModelInferResponse> response =
        client.ModelInfer(*request);
    status = response.status();
    if (response.ok()) {
      status = PrintPiece(*response, false, &finish_reason);
      continued = true;
    }
  }
  if (continued) std::fputs("\n", stdout);
  if (!status.ok()) return Fail(status);
  std::fprintf(stderr, "finish_reason: %s\n", finish_reason.c_str());
  return 0;
}

int Load(InferenceClient& client, const CommandArgs& args) {
  if (args.positional.size() != 2) return Usage("load needs MODEL");
  std::string config_json;
  if (auto path = args.flags.find("config-json"); path != args.flags.end()) {
    absl::StatusOr<std::string> json = ReadFile(path->second);
    if (!json.ok()) return Fail(json.status());
    config_json = *json;
  }
  if (absl::Status status = client.Load(args.positional[1], config_json);
      !status.ok()) {
    return Fail(status);
  }
  std::printf("loaded: %s\n", args.positional[1].c_str());
  return 0;
}

int Unload(InferenceClient& client, const CommandArgs& args) {
  if (args.positional.size() != 2) return Usage("unload needs MODEL");
  if (absl::Status status = client.Unload(args.positional[1]); !status.ok()) {
    return Fail(status);
  }
  std::printf("unloaded: %s\n", args.positional[1].c_str());
  return 0;
}

int Dispatch(InferenceClient& client, const CommandArgs& args) {
  const std::string& command = args.positional[0];
  const std::map<std::string, std::function<int()>> handlers = {
      {"live", [&] { return PrintBool("live", client.ServerLive()); }},
      {"ready", [&] { return PrintBool("ready", client.ServerReady()); }},
      {"metadata",
       [&] {
         return args.positional.size() > 1
                    ? PrintJson(client.ModelMetadata(Arg(args, 1)))
                    : ServerMetadata(client);
       }},
      {"health", [&] { return Health(client); }},
      {"config",
       [&] {
         return args.positional.size() == 2
                    ? PrintJson(client.ModelConfig(Arg(args, 1)))
                    : Usage("config needs MODEL");
       }},
      {"infer", [&] { return Infer(client, args); }},
      {"generate", [&] { return Generate(client, args); }},
      {"load", [&] { return Load(client, args); }},
      {"unload", [&] { return Unload(client, args); }},
      {"index", [&] { return PrintJson(client.RepositoryIndex()); }},
      {"stats",
       [&] { return PrintJson(client.ModelStatistics(Arg(args, 1))); }},
  };
  auto it = handlers.find(command);
  if (it == handlers.end()) return Usage("unknown command '" + command + "'");
  return it->second();
}

int Main(const std::vector<std::string>& argv) {
  std::string url = "localhost:8001";
  double timeout_seconds = 5;
  CommandArgs args;
  for (const std::string& arg : argv) {
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
    } else if (arg == "--stream") {
      args.stream = true;
    } else if (arg.rfind("--param=", 0) == 0) {
      args.parameters.push_back(arg.substr(8));
    } else if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      const size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq - 2);
      if (name != "inputs" && name != "outputs" && name != "output-dir" &&
          name != "id" && name != "config-json" && name != "text" &&
          name != "ids") {
        return Usage("unknown flag '" + arg + "'");
      }
      args.flags[name] = arg.substr(eq + 1);
    } else if (arg.rfind("--", 0) == 0) {
      return Usage("unknown flag '" + arg + "'");
    } else {
      args.positional.push_back(arg);
    }
  }
  if (args.positional.empty()) return Usage("expected a command");
  InferenceClient client(url, absl::Seconds(timeout_seconds));
  return Dispatch(client, args);
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  return castserve::Main(std::vector<std::string>(argv + 1, argv + argc));
}
