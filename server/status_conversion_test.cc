#include "server/status_conversion.h"

#include "gtest/gtest.h"

namespace castserve {
namespace {

TEST(StatusConversionTest, KeepsCodeAndMessage) {
  const grpc::Status status =
      ToGrpcStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "queue full");
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kCancelled, absl::StatusCode::kUnimplemented,
        absl::StatusCode::kDataLoss, absl::StatusCode::kInternal}) {
    EXPECT_EQ(
        static_cast<int>(ToGrpcStatus(absl::Status(code, "x")).error_code()),
        static_cast<int>(code));
  }
}

TEST(StatusConversionTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace castserve
