#include "server/core/status_conversion.h"

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

TEST(StatusConversionTest, MessagesQuotingBadBytesBecomeValidUtf8) {
  const grpc::Status status = ToGrpcStatus(
      absl::InvalidArgumentError("/repo/bad\xff/model.safetensors: \x01"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "/repo/bad\\xff/model.safetensors: \\x01");
}

TEST(StatusConversionTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(StatusConversionTest, HttpCodesFollowKServe) {
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kOk), 200);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kCancelled), 503);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(ToHttpStatusCode(absl::StatusCode::kDataLoss), 500);
}

TEST(StatusConversionTest, EveryCodeHasAnHttpStatus) {
  for (int code = 0; code <= 16; ++code) {
    const int http = ToHttpStatusCode(static_cast<absl::StatusCode>(code));
    EXPECT_TRUE(code == 0 ? http == 200 : http >= 400 && http < 600) << code;
  }
  EXPECT_EQ(ToHttpStatusCode(static_cast<absl::StatusCode>(99)), 500);
}

}  // namespace
}  // namespace castserve
