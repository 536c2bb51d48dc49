#include <gtest/gtest.h>

#include "phos/http/server.h"

namespace phos::http {
namespace {

TEST(RouterTest, MatchesPathParameters) {
  Router router;
  ASSERT_TRUE(router.Add("POST", "/v1/functions/{name}/invoke", [](Request, Responder) {}).ok());
  Router::Match m = router.Find("POST", "/v1/functions/mlp/invoke");
  ASSERT_EQ(m.kind, Router::MatchKind::kFound);
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].first, "name");
  EXPECT_EQ(m.params[0].second, "mlp");
  EXPECT_EQ(router.Find("POST", "/v1/functions/invoke").kind, Router::MatchKind::kNoRoute);
  EXPECT_EQ(router.Find("POST", "/v1/functions/a/b/invoke").kind, Router::MatchKind::kNoRoute);
}

TEST(RouterTest, WrongMethodListsAllowed) {
  Router router;
  ASSERT_TRUE(router.Add("GET", "/v1/functions", [](Request, Responder) {}).ok());
  ASSERT_TRUE(router.Add("POST", "/v1/functions", [](Request, Responder) {}).ok());
  Router::Match m = router.Find("DELETE", "/v1/functions");
  EXPECT_EQ(m.kind, Router::MatchKind::kWrongMethod);
  EXPECT_EQ(m.allow, "GET, POST");
}

TEST(RouterTest, RejectsBadPatternsAndDuplicates) {
  Router router;
  EXPECT_EQ(router.Add("GET", "no-slash", [](Request, Responder) {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(router.Add("GET", "/a/{x", [](Request, Responder) {}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(router.Add("GET", "/a/{x}", [](Request, Responder) {}).ok());
  EXPECT_EQ(router.Add("GET", "/a/{x}", [](Request, Responder) {}).code(), StatusCode::kAlreadyExists);
}

TEST(ParseHostPortTest, AcceptsV4V6AndRejectsGarbage) {
  auto v4 = ParseHostPort("127.0.0.1:7070");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->first, "127.0.0.1");
  EXPECT_EQ(v4->second, 7070);
  auto v6 = ParseHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, "::1");
  EXPECT_FALSE(ParseHostPort("localhost").ok());
  EXPECT_FALSE(ParseHostPort("h:70000").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
  EXPECT_FALSE(ParseHostPort("h:8x").ok());
}

TEST(RequestTest, HeaderLookupIsCaseInsensitive) {
  Request r;
  r.headers = {{"Content-Type", "a"}, {"X-Phos-Timeout-Ms", "5"}};
  ASSERT_NE(r.Header("x-phos-timeout-ms"), nullptr);
  EXPECT_EQ(*r.Header("x-phos-timeout-ms"), "5");
  EXPECT_EQ(r.Header("missing"), nullptr);
}

}  // namespace
}  // namespace phos::http
