// How phosd's answers come back through the C API, against a stand-in phosd (phos::http::Server)
// that answers each function name with a canned answer: both forms of error body, a known code
// over the HTTP status, the HTTP status by route, streamed answers stopped or cut short, what
// phosd says about a call, and request and response bytes passed through as they are.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "phos.h"
#include "phos/http/server.h"

namespace {

using phos::http::Request;
using phos::http::Responder;
using phos::http::Response;

// Function name -> the answer to invoking, deploying, checkpointing or removing it.
const std::map<std::string, std::pair<int, std::string>>& Canned() {
  static const auto* canned = new std::map<std::string, std::pair<int, std::string>>{
      {"old-form", {404, R"({"error": "no function 'old-form'"})"}},
      {"new-form", {500, R"({"error": {"code": "function_error", "message": "boom"}})"}},
      {"code-wins", {503, R"({"error": {"code": "timeout", "message": "late"}})"}},
      {"unknown-code", {502, R"({"error": {"code": "martian", "message": "gone"}})"}},
      {"not-json", {503, "<html>busy</html>"}},
      {"bad-request", {400, R"({"error": "no seed"})"}},
      {"unauthenticated", {401, R"({"error": "needs a token"})"}},
      {"forbidden", {403, R"({"error": "wrong token"})"}},
      {"taken", {409, R"({"error": "exists"})"}},
      {"gone", {412, R"({"error": "chunks collected"})"}},
      {"busy", {429, R"({"error": "slow down"})"}},
      {"unbuilt", {501, R"({"error": "not built"})"}},
      {"late", {504, R"({"error": "deadline"})"}},
      {"teapot", {418, ""}},
      {"broken", {500, R"({"error": "invariant"})"}},
  };
  return *canned;
}

void SendCanned(const Request& req, const Responder& out) {
  auto it = Canned().find(std::string(req.Param("name")));
  if (it == Canned().end()) return out.Send(Response::Json(500, R"({"error": "no canned answer"})"));
  out.Send(Response::Json(it->second.first, it->second.second));
}

void AnswerHealth(Request, Responder out) {
  out.Send(Response::Text(200, "ok\n"));
}

// The deploy's function name, from the spec phos_deploy sends ({"name":"...", ...}).
void AnswerDeploy(Request req, Responder out) {
  const size_t at = req.body.find("\"name\":\"");
  const size_t end = req.body.find('"', at + 8);
  req.params.emplace_back("name", req.body.substr(at + 8, end - at - 8));
  SendCanned(req, out);
}

void AnswerInvoke(Request req, Responder out) {
  const std::string name(req.Param("name"));
  if (name == "echo") {
    // The request's bytes back, with what phosd says of a restored instance.
    Response r = Response::Text(200, req.body);
    r.headers.emplace_back("X-Phos-Restore-Mode", "phos");
    r.headers.emplace_back("X-Phos-Stage-First-Byte-Us", "1234");
    return out.Send(std::move(r));
  }
  if (name == "whoami") {
    const std::string* auth = req.Header("Authorization");
    return out.Send(Response::Text(200, auth != nullptr ? *auth : "none"));
  }
  if (name == "long-mode") {
    Response r = Response::Text(200, "{}");
    r.headers.emplace_back("X-Phos-Restore-Mode", std::string(100, 'm'));
    return out.Send(std::move(r));
  }
  if (name == "pieces" || name == "cut") {
    out.Begin(Response::Text(200, ""));
    out.Chunk("first;");
    out.Chunk("second;");
    if (name == "cut") return out.Abort();
    out.Chunk("third;");
    return out.End();
  }
  SendCanned(req, out);
}

class CapiAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    phos::http::Router router;
    ASSERT_TRUE(router.Add("GET", "/healthz", AnswerHealth).ok());
    ASSERT_TRUE(router.Add("POST", "/v1/functions", AnswerDeploy).ok());
    ASSERT_TRUE(router.Add("DELETE", "/v1/functions/{name}", SendCanned).ok());
    ASSERT_TRUE(router.Add("POST", "/v1/functions/{name}/checkpoint", SendCanned).ok());
    ASSERT_TRUE(router.Add("POST", "/v1/functions/{name}/invoke", AnswerInvoke).ok());
    phos::http::ServerOptions options;
    options.listen = "127.0.0.1:0";
    auto server = phos::http::Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    const std::string endpoint = "http://127.0.0.1:" + std::to_string(server_->port()) + "/";
    ASSERT_EQ(phos_connect(endpoint.c_str(), "tok", &client_), PHOS_OK) << phos_last_error();
  }
  void TearDown() override { EXPECT_EQ(phos_close(client_), PHOS_OK); }

  // phos_invoke's status for function `name`; its answer in *body when it succeeded.
  phos_status Invoke(const char* name, const std::string& request = "{}", std::string* body = nullptr,
                     phos_invoke_info* info = nullptr) {
    void* response = nullptr;
    size_t len = 0;
    phos_status s =
        phos_invoke(client_, name, request.data(), request.size(), nullptr, &response, &len, info);
    if (body != nullptr && response != nullptr) body->assign(static_cast<const char*>(response), len);
    phos_free(response);
    return s;
  }

  std::unique_ptr<phos::http::Server> server_;
  phos_client* client_ = nullptr;
};

TEST_F(CapiAnswersTest, BothFormsOfErrorBodyGiveTheirMessage) {
  EXPECT_EQ(Invoke("old-form"), PHOS_NOT_FOUND);
  EXPECT_STREQ(phos_last_error(), "invoke 'old-form': no function 'old-form' (HTTP 404)");
  EXPECT_EQ(Invoke("new-form"), PHOS_FUNCTION_ERROR);
  EXPECT_STREQ(phos_last_error(), "invoke 'new-form': boom (HTTP 500)");
  // A code this version knows decides; one it does not leaves it to the HTTP status.
  EXPECT_EQ(Invoke("code-wins"), PHOS_TIMEOUT);
  EXPECT_STREQ(phos_last_error(), "invoke 'code-wins': late (HTTP 503)");
  EXPECT_EQ(Invoke("unknown-code"), PHOS_INSTANCE_LOST);
  EXPECT_STREQ(phos_last_error(), "invoke 'unknown-code': gone (HTTP 502)");
  // Not phosd's JSON: the body is the message.
  EXPECT_EQ(Invoke("not-json"), PHOS_UNAVAILABLE);
  EXPECT_STREQ(phos_last_error(), "invoke 'not-json': <html>busy</html> (HTTP 503)");
  EXPECT_EQ(Invoke("teapot"), PHOS_INVALID_ARGUMENT);
  EXPECT_STREQ(phos_last_error(), "invoke 'teapot': no reason given (HTTP 418)");
}

TEST_F(CapiAnswersTest, TheHttpStatusMapsByRoute) {
  const std::map<std::string, phos_status> invoked = {
      {"bad-request", PHOS_FUNCTION_ERROR},
      {"broken", PHOS_FUNCTION_ERROR},
      {"unauthenticated", PHOS_UNAUTHENTICATED},
      {"forbidden", PHOS_PERMISSION_DENIED},
      {"taken", PHOS_FAILED_PRECONDITION},
      {"gone", PHOS_FAILED_PRECONDITION},
      {"busy", PHOS_TOO_MANY_REQUESTS},
      {"unbuilt", PHOS_NOT_SUPPORTED},
      {"late", PHOS_TIMEOUT},
  };
  for (const auto& [name, status] : invoked) {
    EXPECT_EQ(Invoke(name.c_str()), status) << name << ": " << phos_last_error();
  }

  phos_deploy_options deploy{};
  deploy.struct_size = sizeof(deploy);
  deploy.executable = "/bin/true";
  deploy.name = "taken";
  EXPECT_EQ(phos_deploy(client_, &deploy, nullptr), PHOS_ALREADY_EXISTS) << phos_last_error();
  deploy.name = "bad-request";
  EXPECT_EQ(phos_deploy(client_, &deploy, nullptr), PHOS_INVALID_ARGUMENT) << phos_last_error();
  deploy.name = "broken";
  EXPECT_EQ(phos_deploy(client_, &deploy, nullptr), PHOS_INTERNAL) << phos_last_error();
  EXPECT_EQ(phos_checkpoint(client_, "taken", 0, nullptr, nullptr), PHOS_FAILED_PRECONDITION)
      << phos_last_error();
  EXPECT_EQ(phos_remove(client_, "broken"), PHOS_INTERNAL) << phos_last_error();
  EXPECT_EQ(phos_remove(client_, "bad-request"), PHOS_INVALID_ARGUMENT) << phos_last_error();
}

TEST_F(CapiAnswersTest, RequestAndAnswerBytesPassAsTheyAre) {
  const std::string request("a\0b\xff{", 5);
  std::string body;
  phos_invoke_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(Invoke("echo", request, &body, &info), PHOS_OK) << phos_last_error();
  EXPECT_EQ(body, request);
  EXPECT_STREQ(info.restore_mode, "phos");
  EXPECT_EQ(info.first_byte_us, 1234);

  ASSERT_EQ(Invoke("whoami", "", &body, &info), PHOS_OK) << phos_last_error();
  EXPECT_EQ(body, "Bearer tok");
  EXPECT_STREQ(info.restore_mode, "") << "not said";
  EXPECT_EQ(info.first_byte_us, -1) << "not said";

  ASSERT_EQ(Invoke("long-mode", "", &body, &info), PHOS_OK) << phos_last_error();
  EXPECT_EQ(std::string(info.restore_mode), std::string(sizeof(info.restore_mode) - 1, 'm'));
}

struct Pieces {
  std::string bytes;
  int calls = 0;
  int stop_after = 0;  // 0: never stop
};
int TakePiece(void* user, const void* data, size_t len) {
  auto* pieces = static_cast<Pieces*>(user);
  pieces->bytes.append(static_cast<const char*>(data), len);
  return ++pieces->calls == pieces->stop_after ? 1 : 0;
}

TEST_F(CapiAnswersTest, AStreamedAnswerComesInPiecesUntilTheCallerStops) {
  Pieces all;
  ASSERT_EQ(phos_invoke_stream(client_, "pieces", "{}", 2, nullptr, TakePiece, &all, nullptr), PHOS_OK)
      << phos_last_error();
  EXPECT_EQ(all.bytes, "first;second;third;");
  EXPECT_GE(all.calls, 1);

  Pieces first;
  first.stop_after = 1;
  ASSERT_EQ(phos_invoke_stream(client_, "pieces", "{}", 2, nullptr, TakePiece, &first, nullptr), PHOS_OK)
      << phos_last_error();
  EXPECT_EQ(first.calls, 1) << "not called again once it asked to stop";

  std::string blocking;
  ASSERT_EQ(Invoke("pieces", "{}", &blocking), PHOS_OK) << phos_last_error();
  EXPECT_EQ(blocking, "first;second;third;");
}

TEST_F(CapiAnswersTest, AStreamedAnswerCutShortIsAnInstanceLost) {
  Pieces cut;
  EXPECT_EQ(phos_invoke_stream(client_, "cut", "{}", 2, nullptr, TakePiece, &cut, nullptr),
            PHOS_INSTANCE_LOST);
  EXPECT_NE(std::string(phos_last_error()).find("cut short"), std::string::npos) << phos_last_error();
  EXPECT_EQ(Invoke("cut"), PHOS_INSTANCE_LOST) << phos_last_error();
}

}  // namespace
