#ifndef CASTSERVE_SERVER_SERVER_H_
#define CASTSERVE_SERVER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "models/cancellation.h"
#include "platform/clock.h"
#include "server/http/http_server_options.h"

namespace grpc {
class Server;
}

namespace castserve {
namespace platform {
class Executor;
}

class HttpServer;
class InferenceCore;
class InferenceService;
class MetricsExporter;
class ModelManager;
class ModelRepository;
class PathPrefixRouter;
class RestService;
namespace openai {
class OpenAiService;
}
class ServedModelFactory;
class TokenAuthenticator;

struct ServerOptions {
  std::string model_repository;
  std::string bind_address = "0.0.0.0";
  // 0 picks a free port; see grpc_port() / metrics_port() / http_port().
  int grpc_port = 8001;
  int metrics_port = 8002;
  // The KServe v2 REST port; nullopt: none.
  std::optional<int> http_port = 8000;
  // The metrics port's connection limits and optional TLS.
  HttpServerOptions metrics_http;
  // The REST port's; its request bodies are bounded by max_message_bytes.
  HttpServerOptions http;
  // TLS on the gRPC port: PEM files, watched and reloaded when they change
  // (checked every 10 s). Empty cert_file: plaintext. With client_ca_file,
  // clients must present a certificate it signed.
  struct GrpcTls {
    std::string cert_file;
    std::string key_file;
    std::string client_ca_file;
  } grpc_tls;
  // Bearer tokens for every port (InferenceCore, MetricsExporter); null:
  // none needed.
  std::shared_ptr<TokenAuthenticator> auth;
  // Memory models may use together; 0 means no budget (ModelManager).
  int64_t memory_budget_bytes = 0;
  // Memory tiers and the default keep_alive (ModelManagerOptions).
  bool memory_tiers = true;
  absl::Duration keep_alive = absl::InfiniteDuration();
  // Largest gRPC message received or sent, and largest REST request body
  // (413); a larger request fails with RESOURCE_EXHAUSTED before any
  // handler runs.
  int64_t max_message_bytes = int64_t{256} << 20;
  // LibTorch threads and the limits on model configs (FactoryOptions).
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  int max_instances_per_model = 16;
  double max_warmup_seconds = 300;
  bool allow_symlinks_outside_repository = false;
  // Set by the caller to stop at once (a stop signal during startup):
  // cancels every load and forward. May be null.
  std::shared_ptr<const models::Cancellation> stop;
  // Makes the models (not owned; outlives the server). Null: an
  // HfServedModelFactory from the options above. Tests pass fakes.
  ServedModelFactory* model_factory = nullptr;
  // What deadlines, timeouts and the shutdown grace are measured with (the
  // manager's, the core's, the factory's; not owned, outlives the server).
  // Tests drive a fake one. gRPC's own shutdown deadline is real time.
  platform::Clock* clock = &platform::Clock::Real();
};

// The running daemon: the gRPC server (KServe v2 service and
// grpc.health.v1), the REST port (KServe v2 over HTTP), both on one
// InferenceCore, the metrics exporter, the model repository and the
// ModelManager serving its models (built by HfServedModelFactory).
// Create starts everything; Shutdown (or the destructor) stops it.
// Thread-safe.
class Server {
 public:
  // Opens the repository and logs what it holds, binds the metrics port,
  // loads the `startup` models (a model that fails becomes UNAVAILABLE; the
  // server still starts), then binds the gRPC and REST ports and becomes
  // ready.
  // Errors: the repository's (NotFound, FailedPrecondition, PermissionDenied)
  // or FailedPrecondition naming an address that cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Create(
      const ServerOptions& options);

  ~Server();

  // Marks the server not ready (health NOT_SERVING), stops accepting calls,
  // lets in-flight calls finish for up to `grace`, then cancels the rest
  // (their forwards stop at the next module, loads at their next step) and
  // unloads every model. Idempotent.
  void Shutdown(absl::Duration grace);

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const;
  // 0 when there is no REST port.
  int http_port() const;

 private:
  explicit Server(platform::Clock* clock);

  absl::Status StartModels(const ServerOptions& options);
  absl::Status StartGrpc(const ServerOptions& options);
  absl::Status StartRest(const ServerOptions& options);
  // Stops intake on both ports and waits for their calls, cancelling every
  // forward and load once `grace` has passed.
  void DrainCalls(absl::Duration grace);

  platform::Clock& clock_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> shut_down_{false};
  // Runs the work that must not hold a gRPC thread (first-request loads,
  // repository loads and unloads) and the shutdown's canceller; Shutdown
  // drains it. Destroyed last.
  std::unique_ptr<platform::Executor> executor_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ServedModelFactory> owned_factory_;
  ServedModelFactory* factory_ = nullptr;  // owned_factory_ or the options'.
  // Destroyed before the factory and the repository it points to.
  std::unique_ptr<ModelManager> manager_;
  // Outlives both protocols' services.
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<RestService> rest_service_;
  // The OpenAI API under /v1 on the REST port.
  std::unique_ptr<openai::OpenAiService> openai_service_;
  // KServe v2 and the OpenAI API on the one REST port.
  std::unique_ptr<PathPrefixRouter> rest_router_;
  // Destroyed before the services it serves.
  std::unique_ptr<HttpServer> rest_http_;
  std::unique_ptr<MetricsExporter> metrics_;
  int grpc_port_ = 0;
  std::shared_ptr<TokenAuthenticator> auth_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVER_H_
