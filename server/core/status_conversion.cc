#include "server/core/status_conversion.h"

#include <string>

#include "platform/sanitized_text.h"

namespace castserve {
namespace {

// The bound on a message that had to be sanitized.
constexpr size_t kMaxGrpcMessageBytes = 4096;

struct HttpRow {
  absl::StatusCode code;
  int http_status;
};

// KServe and Triton answer a request that breaks a rule with 400, an
// unknown model with 404 and a server or model that cannot serve with 503;
// the rest follow HTTP's meanings. CANCELLED reaches a client only when the
// server cancelled (an unload, a shutdown): the client's own cancellation
// is a closed connection, which gets no answer.
constexpr HttpRow kHttpRows[] = {
    {absl::StatusCode::kOk, 200},
    {absl::StatusCode::kCancelled, 503},
    {absl::StatusCode::kUnknown, 500},
    {absl::StatusCode::kInvalidArgument, 400},
    {absl::StatusCode::kDeadlineExceeded, 504},
    {absl::StatusCode::kNotFound, 404},
    {absl::StatusCode::kAlreadyExists, 409},
    {absl::StatusCode::kPermissionDenied, 403},
    {absl::StatusCode::kResourceExhausted, 429},
    {absl::StatusCode::kFailedPrecondition, 400},
    {absl::StatusCode::kAborted, 409},
    {absl::StatusCode::kOutOfRange, 400},
    {absl::StatusCode::kUnimplemented, 501},
    {absl::StatusCode::kInternal, 500},
    {absl::StatusCode::kUnavailable, 503},
    {absl::StatusCode::kDataLoss, 500},
    {absl::StatusCode::kUnauthenticated, 401},
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code.
  // Messages quote files, configs and requests: valid UTF-8 for every
  // client's decoder (platform/sanitized_text.h); well-formed ones pass as
  // they are.
  return grpc::Status(
      static_cast<grpc::StatusCode>(status.code()),
      platform::IsSanitized(status.message())
          ? std::string(status.message())
          : platform::SanitizeText(status.message(), kMaxGrpcMessageBytes));
}

int ToHttpStatusCode(absl::StatusCode code) {
  for (const HttpRow& row : kHttpRows) {
    if (row.code == code) return row.http_status;
  }
  return 500;  // A code google.rpc.Code does not define.
}

}  // namespace castserve
