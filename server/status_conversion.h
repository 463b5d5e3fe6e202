// absl::Status -> grpc::Status: the one place where castserve's internal
// statuses become wire statuses. Thread-safe.
#ifndef CASTSERVE_SERVER_STATUS_CONVERSION_H_
#define CASTSERVE_SERVER_STATUS_CONVERSION_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace castserve {

// Same code (the two enums share their numbers) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_STATUS_CONVERSION_H_
