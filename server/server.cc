#include "server/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "server/inference_service.h"
#include "server/log.h"
#include "server/metrics_exporter.h"
#include "server/model_repository.h"
#include "server/port_check.h"
#include "server/process_metrics.h"

namespace castserve {

Server::Server() = default;

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server());
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository =
      ModelRepository::Open(options.model_repository);
  if (!repository.ok()) return repository.status();
  server->repository_ = *std::move(repository);
  if (absl::Status status = server->ScanRepository(); !status.ok()) {
    return status;
  }

  absl::StatusOr<std::unique_ptr<MetricsExporter>> metrics =
      MetricsExporter::Start(
          options.bind_address, options.metrics_port,
          {std::make_shared<ProcessMetrics>()},
          [raw = server.get()] { return raw->ready_.load(); });
  if (!metrics.ok()) return metrics.status();
  server->metrics_ = *std::move(metrics);

  if (absl::Status status = server->StartGrpc(options); !status.ok()) {
    return status;
  }
  server->ready_ = true;
  Log(LogLevel::kInfo, "castserve ready",
      {{"grpc_port", server->grpc_port_},
       {"metrics_port", server->metrics_port()}});
  return server;
}

absl::Status Server::ScanRepository() {
  absl::StatusOr<std::vector<ModelEntry>> models = repository_->Scan();
  if (!models.ok()) return models.status();
  Log(LogLevel::kInfo, "model repository opened",
      {{"path", repository_->path()}, {"models", models->size()}});
  for (const ModelEntry& model : *models) {
    if (model.config.ok()) {
      Log(LogLevel::kInfo, "model found",
          {{"name", model.name}, {"directory", model.directory}});
    } else {
      Log(LogLevel::kWarning, "model unavailable",
          {{"name", model.name}, {"reason", model.config.status().message()}});
    }
  }
  return absl::OkStatus();
}

absl::Status Server::StartGrpc(const ServerOptions& options) {
  if (options.grpc_port != 0) {
    // gRPC reports a failed bind with several lines of its own; checking
    // first gives one precise error instead.
    if (absl::Status status =
            CheckPortAvailable(options.bind_address, options.grpc_port);
        !status.ok()) {
      return status;
    }
  }
  grpc::EnableDefaultHealthCheckService(true);
  service_ = std::make_unique<InferenceService>(&ready_);
  grpc::ServerBuilder builder;
  // Two daemons must not silently share a port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Tensors travel in request bodies; the 4 MB default is too small.
  builder.SetMaxReceiveMessageSize(512 * 1024 * 1024);
  builder.SetMaxSendMessageSize(512 * 1024 * 1024);
  const std::string address =
      absl::StrCat(options.bind_address, ":", options.grpc_port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
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

int Server::metrics_port() const { return metrics_->port(); }

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_.exchange(true)) return;
  ready_ = false;
  if (grpc_server_ != nullptr) {
    grpc_server_->GetHealthCheckService()->SetServingStatus(false);
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    grpc_server_->Wait();
  }
  metrics_.reset();
}

}  // namespace castserve
