// HttpPeer, the other phosd an instance moved to, as a stand-in server sees it: a forwarded
// invocation carries the node's admin token, what is left of the deadline, and the request's id.
#include "nodes.h"

#include <chrono>
#include <future>
#include <mutex>
#include <string>

#include <gtest/gtest.h>

#include "phos/http/server.h"

namespace phos::phosd {
namespace {

TEST(HttpPeerTest, AForwardedInvocationCarriesTheTokenTheDeadlineAndTheRequestId) {
  std::mutex mu;
  std::string authorization, timeout, request_id, body;
  http::Router router;
  ASSERT_TRUE(router.Add("POST", "/v1/functions/{name}/invoke", [&](http::Request r, http::Responder out) {
    std::lock_guard lock(mu);
    if (const std::string* h = r.Header("Authorization")) authorization = *h;
    if (const std::string* h = r.Header("X-Phos-Timeout-Ms")) timeout = *h;
    if (const std::string* h = r.Header("X-Request-Id")) request_id = *h;
    body = r.body;
    out.Send(http::Response::Text(200, "answered there"));
  }).ok());
  http::ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = http::Server::Start(options, std::move(router));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto peer = HttpPeer::Make("http://127.0.0.1:" + std::to_string((*server)->port()), "their-token", nullptr);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();

  std::promise<runtime::InvokeOutcome> answered;
  (*peer)->Invoke("mlp", {.request = "{}", .timeout = std::chrono::seconds(30), .request_id = "trace-9"},
                  [&](runtime::InvokeOutcome o) { answered.set_value(std::move(o)); });
  runtime::InvokeOutcome o = answered.get_future().get();
  EXPECT_EQ(o.kind, runtime::InvokeOutcome::Kind::kOk) << o.error.ToString();
  EXPECT_EQ(o.body, "answered there");
  std::lock_guard lock(mu);
  EXPECT_EQ(authorization, "Bearer their-token");
  EXPECT_EQ(request_id, "trace-9");
  EXPECT_EQ(body, "{}");
  ASSERT_FALSE(timeout.empty());
  EXPECT_GT(std::stoll(timeout), 0);
  EXPECT_LE(std::stoll(timeout), 30000);
}

// A node is named by http://HOST:PORT (the endpoint parser phos-fn and the C API use); a Unix
// socket, a path or another scheme is refused, and a token is needed.
TEST(HttpPeerTest, ANodeIsNamedByItsHttpEndpoint) {
  auto peer = HttpPeer::Make("http://127.0.0.1:7071/", "t", nullptr);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  EXPECT_EQ((*peer)->Name(), "http://127.0.0.1:7071");
  for (const char* bad : {"unix:///run/phos/api.sock", "http://127.0.0.1:7071/v1", "https://h:1", "h:1"}) {
    EXPECT_EQ(HttpPeer::Make(bad, "t", nullptr).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(HttpPeer::Make("http://127.0.0.1:7071", "", nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phos::phosd
