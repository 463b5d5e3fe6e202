#include "server/rest/rest_routes.h"

#include "gtest/gtest.h"

namespace castserve {
namespace {

TEST(RestRoutesTest, ServerPaths) {
  RouteMatch live = MatchRestRoute("GET", "/v2/health/live");
  ASSERT_TRUE(live.route.has_value());
  EXPECT_EQ(live.route->operation, RestOperation::kServerLive);
  EXPECT_FALSE(live.route->scope.has_value());
  EXPECT_EQ(MatchRestRoute("HEAD", "/v2/health/ready").route->operation,
            RestOperation::kServerReady);
  RouteMatch metadata = MatchRestRoute("GET", "/v2");
  EXPECT_EQ(metadata.route->operation, RestOperation::kServerMetadata);
  EXPECT_EQ(metadata.route->scope, Scope::kInfer);
}

TEST(RestRoutesTest, ModelPathsCaptureNameAndVersion) {
  RouteMatch infer = MatchRestRoute("POST", "/v2/models/bert/infer");
  ASSERT_TRUE(infer.route.has_value());
  EXPECT_EQ(infer.route->operation, RestOperation::kModelInfer);
  EXPECT_EQ(infer.route->model, "bert");
  EXPECT_EQ(infer.route->version, "");
  EXPECT_EQ(infer.route->scope, Scope::kInfer);
  RouteMatch versioned =
      MatchRestRoute("GET", "/v2/models/bert/versions/1/config");
  EXPECT_EQ(versioned.route->operation, RestOperation::kModelConfig);
  EXPECT_EQ(versioned.route->model, "bert");
  EXPECT_EQ(versioned.route->version, "1");
  EXPECT_EQ(MatchRestRoute("GET", "/v2/models/bert").route->operation,
            RestOperation::kModelMetadata);
  EXPECT_EQ(MatchRestRoute("GET", "/v2/models/bert/ready").route->operation,
            RestOperation::kModelReady);
  EXPECT_EQ(
      MatchRestRoute("GET", "/v2/models/bert/versions/1/stats").route->model,
      "bert");
}

TEST(RestRoutesTest, GeneratePathsArePostWithOptionalVersion) {
  RouteMatch generate = MatchRestRoute("POST", "/v2/models/llm/generate");
  ASSERT_TRUE(generate.route.has_value());
  EXPECT_EQ(generate.route->operation, RestOperation::kModelGenerate);
  EXPECT_EQ(generate.route->model, "llm");
  EXPECT_EQ(generate.route->scope, Scope::kInfer);
  RouteMatch stream =
      MatchRestRoute("POST", "/v2/models/llm/versions/3/generate_stream");
  ASSERT_TRUE(stream.route.has_value());
  EXPECT_EQ(stream.route->operation, RestOperation::kModelGenerateStream);
  EXPECT_EQ(stream.route->version, "3");
  RouteMatch get = MatchRestRoute("GET", "/v2/models/llm/generate_stream");
  EXPECT_EQ(get.status_code, 405);
  EXPECT_EQ(get.allow, "POST");
}

TEST(RestRoutesTest, AllModelStatisticsBeforeModelNamedStats) {
  RouteMatch all = MatchRestRoute("GET", "/v2/models/stats");
  ASSERT_TRUE(all.route.has_value());
  EXPECT_EQ(all.route->operation, RestOperation::kModelStatistics);
  EXPECT_EQ(all.route->model, "");
}

TEST(RestRoutesTest, RepositoryPathsNeedAdmin) {
  RouteMatch index = MatchRestRoute("POST", "/v2/repository/index");
  EXPECT_EQ(index.route->operation, RestOperation::kRepositoryIndex);
  EXPECT_EQ(index.route->scope, Scope::kAdmin);
  RouteMatch load = MatchRestRoute("POST", "/v2/repository/models/m/load");
  EXPECT_EQ(load.route->operation, RestOperation::kRepositoryLoad);
  EXPECT_EQ(load.route->model, "m");
  EXPECT_EQ(
      MatchRestRoute("POST", "/v2/repository/models/m/unload").route->operation,
      RestOperation::kRepositoryUnload);
}

TEST(RestRoutesTest, WrongMethodIs405WithAllow) {
  RouteMatch get_infer = MatchRestRoute("GET", "/v2/models/m/infer");
  EXPECT_FALSE(get_infer.route.has_value());
  EXPECT_EQ(get_infer.status_code, 405);
  EXPECT_EQ(get_infer.allow, "POST");
  RouteMatch post_ready = MatchRestRoute("POST", "/v2/health/ready");
  EXPECT_EQ(post_ready.status_code, 405);
  EXPECT_EQ(post_ready.allow, "GET, HEAD");
  EXPECT_EQ(MatchRestRoute("DELETE", "/v2/repository/index").status_code, 405);
}

TEST(RestRoutesTest, OtherPathsAre404) {
  for (const char* path :
       {"", "/", "/v1", "/v2/", "/v2/models", "/v2/models/m/infer/x",
        "/v2/repository/models/m", "/metrics", "v2/health/live"}) {
    RouteMatch match = MatchRestRoute("GET", path);
    EXPECT_FALSE(match.route.has_value()) << path;
    EXPECT_EQ(match.status_code, 404) << path;
  }
}

}  // namespace
}  // namespace castserve
