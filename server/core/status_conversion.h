// absl::Status -> wire statuses: the one place where castserve's internal
// statuses become gRPC statuses and HTTP status codes. Thread-safe.
#ifndef CASTSERVE_SERVER_CORE_STATUS_CONVERSION_H_
#define CASTSERVE_SERVER_CORE_STATUS_CONVERSION_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace castserve {

// Same code (the two enums share their numbers) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The HTTP status code that answers `code` on the REST port (one row per
// code in status_conversion.cc): 400 for requests that break a rule, 401 /
// 403 for tokens, 404 for unknown models, 429 when a queue or the memory is
// full, 503 when a model or the server is not available, 504 when a
// deadline passed, 500 for castserve's own failures.
int ToHttpStatusCode(absl::StatusCode code);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_CORE_STATUS_CONVERSION_H_
