#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "casting/memory/device_memory.h"
#include "casting/memory/tracking_allocator.h"
#include "platform/executor.h"
#include "server/core/auth.h"
#include "server/core/inference_core.h"
#include "server/grpc/inference_service.h"
#include "server/http/http_server.h"
#include "server/http/path_prefix_router.h"
#include "server/http/port_check.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/model_repository.h"
#include "server/log.h"
#include "server/metrics/metrics_exporter.h"
#include "server/metrics/process_metrics.h"
#include "server/metrics/serving_metrics.h"
#include "server/openai/openai_service.h"
#include "server/rest/rest_service.h"
#include "server/servables/factory/hf_served_model_factory.h"

namespace castserve {

namespace {

std::shared_ptr<ServingMetrics> MakeServingMetrics(
    std::shared_ptr<std::atomic<ModelManager*>> manager_ref,
    int64_t memory_budget_bytes) {
  ServingMetricsOptions options;
  options.memory_budget_bytes = memory_budget_bytes;
  options.model_states = [manager_ref] {
    std::vector<ModelStateSample> samples;
    ModelManager* manager = manager_ref->load();
    if (manager == nullptr) return samples;
    for (const ModelStatus& status : manager->Index()) {
      samples.push_back(
          {status.name, status.version, ModelStateName(status.state)});
    }
    return samples;
  };
  options.ready_models = [manager_ref] {
    ModelManager* manager = manager_ref->load();
    return manager == nullptr
               ? std::vector<
                     std::pair<std::string, std::shared_ptr<ServedModel>>>()
               : manager->ReadyModels();
  };
  // Installed by the model factory, made before the exporter starts, so
  // that the device families exist from the first scrape.
  if (casting::TrackingAllocator* allocator =
          casting::TrackingAllocator::Installed()) {
    options.devices.push_back(allocator);
  }
  // Each visible CUDA device's caching allocator (none without CUDA). Kept
  // for the process: the exporter may outlive this call's server.
  static const auto* const cuda_devices =
      new std::vector<std::unique_ptr<casting::DeviceMemoryStats>>(
          casting::NewCudaDeviceMemoryStats());
  for (const auto& stats : *cuda_devices)
    options.devices.push_back(stats.get());
  return std::make_shared<ServingMetrics>(std::move(options));
}

FactoryOptions FactoryOptionsFrom(const ServerOptions& options) {
  FactoryOptions factory_options;
  factory_options.intra_op_threads = options.intra_op_threads;
  factory_options.inter_op_threads = options.inter_op_threads;
  factory_options.max_warmup_request_bytes = options.max_message_bytes;
  factory_options.max_instances = options.max_instances_per_model;
  factory_options.max_warmup_duration =
      absl::Seconds(options.max_warmup_seconds);
  factory_options.allow_symlinks_outside_repository =
      options.allow_symlinks_outside_repository;
  factory_options.clock = options.clock;
  return factory_options;
}

// Plaintext, or TLS from files gRPC watches and reloads when they change.
std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(
    const ServerOptions::GrpcTls& tls) {
  if (tls.cert_file.empty()) return grpc::InsecureServerCredentials();
  constexpr unsigned int kRefreshSeconds = 10;
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file, tls.cert_file, tls.client_ca_file, kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (tls.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace

Server::Server(platform::Clock* clock)
    : clock_(*clock), executor_(platform::NewThreadExecutor()) {}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server(options.clock));
  server->auth_ = options.auth;
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open(options.model_repository,
                            options.allow_symlinks_outside_repository);
  if (!repository.ok()) return repository.status();
  server->repository_ = *std::move(repository);
  if (options.model_factory != nullptr) {
    server->factory_ = options.model_factory;
  } else {
    server->owned_factory_ =
        std::make_unique<HfServedModelFactory>(FactoryOptionsFrom(options));
    server->factory_ = server->owned_factory_.get();
  }

  // Scrapes start before the models load: the manager is published once it
  // exists, and the exporter stops before the manager goes (Shutdown).
  auto manager_ref = std::make_shared<std::atomic<ModelManager*>>(nullptr);
  absl::StatusOr<std::unique_ptr<MetricsExporter>> metrics =
      MetricsExporter::Start(
          options.bind_address, options.metrics_port, options.metrics_http,
          {std::make_shared<ProcessMetrics>(),
           MakeServingMetrics(manager_ref, options.memory_budget_bytes)},
          [raw = server.get()] { return raw->ready_.load(); },
          options.auth.get());
  if (!metrics.ok()) return metrics.status();
  server->metrics_ = *std::move(metrics);

  // Before the models load: a busy port should fail at once, and gRPC
  // reports a failed bind with several lines of its own where this gives
  // one precise error.
  for (int port : {options.grpc_port, options.http_port.value_or(0)}) {
    if (port == 0) continue;
    if (absl::Status status = CheckPortAvailable(options.bind_address, port);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = server->StartModels(options); !status.ok()) {
    return status;
  }
  manager_ref->store(server->manager_.get());
  server->core_ = std::make_unique<InferenceCore>(
      &server->ready_, server->manager_.get(), options.max_message_bytes,
      server->auth_.get(), server->executor_.get(), options.clock);
  if (absl::Status status = server->StartGrpc(options); !status.ok()) {
    return status;
  }
  if (absl::Status status = server->StartRest(options); !status.ok()) {
    return status;
  }
  server->ready_ = true;
  if (server->rest_http_ != nullptr) {
    Log(LogLevel::kInfo, "castserve ready",
        {{"grpc_port", server->grpc_port_},
         {"metrics_port", server->metrics_port()},
         {"http_port", server->http_port()}});
  } else {
    Log(LogLevel::kInfo, "castserve ready",
        {{"grpc_port", server->grpc_port_},
         {"metrics_port", server->metrics_port()}});
  }
  return server;
}

absl::Status Server::StartModels(const ServerOptions& options) {
  ModelManagerOptions manager_options;
  manager_options.repository = repository_.get();
  manager_options.factory = factory_;
  manager_options.memory_budget_bytes = options.memory_budget_bytes;
  manager_options.memory_tiers = options.memory_tiers;
  manager_options.keep_alive = options.keep_alive;
  manager_options.stop = options.stop;
  manager_options.executor = executor_.get();
  manager_options.clock = options.clock;
  absl::StatusOr<std::unique_ptr<ModelManager>> manager =
      ModelManager::Create(manager_options);
  if (!manager.ok()) return manager.status();
  manager_ = *std::move(manager);
  manager_->LoadStartupModels();
  for (const ModelStatus& status : manager_->Index()) {
    Log(LogLevel::kInfo, "model state",
        {{"name", status.name},
         {"state", ModelStateName(status.state)},
         {"reason", status.reason}});
  }
  return absl::OkStatus();
}

absl::Status Server::StartGrpc(const ServerOptions& options) {
  grpc::EnableDefaultHealthCheckService(true);
  service_ = std::make_unique<InferenceService>(core_.get());
  grpc::ServerBuilder builder;
  // Two daemons must not silently share a port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Tensors travel in request bodies; the 4 MB default is too small. gRPC
  // itself answers RESOURCE_EXHAUSTED above the limit.
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  const std::string address =
      absl::StrCat(options.bind_address, ":", options.grpc_port);
  builder.AddListeningPort(address, GrpcCredentials(options.grpc_tls),
                           &grpc_port_);
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || grpc_port_ == 0) {
    grpc_server_.reset();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot serve gRPC on ", address));
  }
  grpc_server_->GetHealthCheckService()->SetServingStatus(true);
  return absl::OkStatus();
}

absl::Status Server::StartRest(const ServerOptions& options) {
  if (!options.http_port.has_value()) return absl::OkStatus();
  rest_service_ = std::make_unique<RestService>(core_.get(), executor_.get());
  openai_service_ =
      std::make_unique<openai::OpenAiService>(core_.get(), executor_.get());
  rest_router_ = std::make_unique<PathPrefixRouter>(
      std::vector<PathPrefixRouter::Route>{
          {{"/v1", "/rerank"}, openai_service_.get()}},
      rest_service_.get());
  HttpServerOptions http = options.http;
  http.limits.max_body_bytes = options.max_message_bytes;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      options.bind_address, *options.http_port, http, rest_router_.get());
  if (!server.ok()) return server.status();
  rest_http_ = *std::move(server);
  return absl::OkStatus();
}

int Server::metrics_port() const { return metrics_->port(); }

int Server::http_port() const {
  return rest_http_ != nullptr ? rest_http_->port() : 0;
}

void Server::DrainCalls(absl::Duration grace) {
  if (grpc_server_ != nullptr) {
    grpc_server_->GetHealthCheckService()->SetServingStatus(false);
  }
  if (rest_http_ != nullptr) rest_http_->StopIntake();
  if (grpc_server_ == nullptr && rest_http_ == nullptr) return;
  // gRPC cancels the calls still running at the deadline but waits for
  // their handlers, and the REST port waits for its answers; cancelling the
  // models' forwards then ends them at their next module instead of after
  // the whole forward.
  absl::Mutex drain_mu;
  bool drained = false;
  std::unique_ptr<platform::Thread> canceller =
      executor_->StartThread([this, grace, &drain_mu, &drained] {
        {
          absl::MutexLock lock(&drain_mu);
          if (clock_.AwaitWithDeadline(&drain_mu, absl::Condition(&drained),
                                       clock_.Now() + grace)) {
            return;
          }
        }
        Log(LogLevel::kWarning,
            "grace period over; cancelling the forwards still running");
        manager_->CancelAll("the daemon is shutting down");
      });
  if (grpc_server_ != nullptr) {
    // gRPC measures its deadline in real time; the canceller above ends the
    // calls at the grace as clock_ counts it.
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    grpc_server_->Wait();
  }
  if (rest_http_ != nullptr) rest_http_->WaitUntilIdle();
  {
    absl::MutexLock lock(&drain_mu);
    drained = true;
  }
  canceller->Join();
}

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_.exchange(true)) return;
  ready_ = false;
  DrainCalls(grace);
  // No call is left that could reach a model. The metrics exporter goes
  // first: its scrapes read the manager. Loads and repository calls that
  // requests started may still run: cancelled, they stop at their next step,
  // and draining the executor waits for them (and the calls they finish).
  metrics_.reset();
  if (manager_ != nullptr) manager_->CancelAll("the daemon is shutting down");
  if (executor_ != nullptr) executor_->Drain();
  // Every REST answer has been given: the port can stop.
  rest_http_.reset();
  manager_.reset();
}

}  // namespace castserve
