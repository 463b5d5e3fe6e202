#include "server/http/path_prefix_router.h"

#include "gtest/gtest.h"

namespace castserve {
namespace {

class NamedService : public HttpService {
 public:
  std::optional<HttpResponse> Screen(const HttpRequest&) override {
    return std::nullopt;
  }
  void Handle(HttpRequest, HttpReply, HttpClientGone) override {}
};

TEST(PathPrefixRouterTest, RoutesAPrefixAndWhatLiesUnderItOnly) {
  NamedService openai;
  NamedService kserve;
  PathPrefixRouter router({{{"/v1", "/rerank"}, &openai}}, &kserve);
  EXPECT_EQ(router.ServiceOf("/v1"), &openai);
  EXPECT_EQ(router.ServiceOf("/v1/chat/completions"), &openai);
  EXPECT_EQ(router.ServiceOf("/rerank"), &openai);
  EXPECT_EQ(router.ServiceOf("/v2/models/m/infer"), &kserve);
  EXPECT_EQ(router.ServiceOf("/v10/models"), &kserve);
  EXPECT_EQ(router.ServiceOf("/reranker"), &kserve);
  EXPECT_EQ(router.ServiceOf("/"), &kserve);
}

}  // namespace
}  // namespace castserve
