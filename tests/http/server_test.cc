// The HTTP server over real loopback sockets, driven by a raw client so that malformed and
// pipelined traffic can be sent byte for byte.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/wait_until.h"
#include "phos/http/client.h"
#include "phos/http/server.h"

namespace phos::http {
namespace {

class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawClient() { close(fd_); }

  void Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early (413): the test checks the answer
      data.remove_prefix(n);
    }
  }

  // Reads until `count` complete responses (by Content-Length) have arrived, or EOF, or a minute
  // (far beyond any scheduling delay of a loaded host: a deadline, not a measurement).
  std::string ReadResponses(int count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (CountComplete() < count && std::chrono::steady_clock::now() < deadline) {
      if (!ReadSome(100)) break;
    }
    return buffer_;
  }

  // Reads until `needle` has arrived (true) or the server closed the connection (false); a server
  // that sends neither is caught by the test's timeout.
  bool ReadUntil(std::string_view needle) {
    while (buffer_.find(needle) == std::string::npos) {
      if (!ReadSome(-1)) return false;
    }
    return true;
  }
  const std::string& received() const { return buffer_; }

  // True when the server closed the connection within a minute (a deadline, as above).
  bool Closed() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char tmp[4096];
      ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return true;
      buffer_.append(tmp, n);
    }
    return false;
  }

 private:
  bool ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return true;
    char tmp[65536];
    ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buffer_.append(tmp, n);
    return true;
  }

  int CountComplete() const {
    int complete = 0;
    size_t pos = 0;
    while (true) {
      size_t end = buffer_.find("\r\n\r\n", pos);
      if (end == std::string::npos) return complete;
      size_t cl = buffer_.find("Content-Length: ", pos);
      if (cl == std::string::npos || cl > end) return complete;
      size_t len = std::stoul(buffer_.substr(cl + 16));
      if (buffer_.size() < end + 4 + len) return complete;
      pos = end + 4 + len;
      ++complete;
    }
  }

  int fd_ = -1;
  std::string buffer_;
};

int Count(const std::string& haystack, std::string_view needle) {
  int n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
  return n;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Router router;
    ASSERT_TRUE(router.Add("POST", "/echo", [](Request r, Responder out) {
      out.Send(Response::Text(200, r.body));
    }).ok());
    ASSERT_TRUE(router.Add("GET", "/fn/{name}/info", [](Request r, Responder out) {
      out.Send(Response::Text(200, "name=" + std::string(r.Param("name")) + " q=" + r.query));
    }).ok());
    // Answers from another thread, later: the async path.
    ASSERT_TRUE(router.Add("GET", "/slow/{ms}", [](Request r, Responder out) {
      int ms = std::stoi(std::string(r.Param("ms")));
      std::thread([out, ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        out.Send(Response::Text(200, "slept " + std::to_string(ms)));
      }).detach();
    }).ok());
    ASSERT_TRUE(router.Add("GET", "/forgotten", [](Request, Responder) {}).ok());
    // A route with a larger body limit than the server's, for requests that bear X-Trusted.
    ASSERT_TRUE(router.Add("POST", "/upload", [](Request r, Responder out) {
      out.Send(Response::Text(200, "got " + std::to_string(r.body.size())));
    }, 10000, [](const Request& head) { return head.Header("X-Trusted") != nullptr; }).ok());
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.max_header_bytes = 1024;
    options.max_body_bytes = 4096;
    // Longer than any test's wait for a close: a connection closed was closed for its request.
    options.idle_timeout_ms = 10 * 60 * 1000;
    auto server = Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  RawClient c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_NE(c.ReadResponses(1).find("\r\n\r\nhello"), std::string::npos);
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nworld");
  std::string all = c.ReadResponses(2);
  EXPECT_EQ(Count(all, "HTTP/1.1 200 OK"), 2);
  EXPECT_NE(all.find("world"), std::string::npos);
}

TEST_F(ServerTest, ChunkedBodyIsDechunked) {
  RawClient c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_NE(r.find("Content-Length: 7\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("abcdefg"), std::string::npos) << r;
}

TEST_F(ServerTest, PipelinedRequestsAnsweredInOrder) {
  RawClient c(server_->port());
  // The first answers late from another thread; the second must still come second.
  c.Send("GET /slow/100 HTTP/1.1\r\nHost: x\r\n\r\n"
         "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond"
         "GET /fn/mlp/info?v=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadResponses(3);
  size_t a = r.find("slept 100");
  size_t b = r.find("second");
  size_t d = r.find("name=mlp q=v=1");
  ASSERT_NE(a, std::string::npos) << r;
  ASSERT_NE(b, std::string::npos) << r;
  ASSERT_NE(d, std::string::npos) << r;
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
}

TEST_F(ServerTest, MalformedRequestGets400AndClose) {
  RawClient c(server_->port());
  c.Send("THIS IS NOT HTTP\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request", 0), 0u) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(c.Closed());
}

TEST_F(ServerTest, OversizeHeaderGets431) {
  RawClient c(server_->port());
  c.Send("GET /fn/a/info HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r;
  EXPECT_TRUE(c.Closed());
}

TEST_F(ServerTest, OversizeBodyGets413ByContentLength) {
  RawClient c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r;
}

TEST_F(ServerTest, OversizeChunkedBodyGets413) {
  RawClient c(server_->port());
  std::string chunk(3000, 'z');
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nBB8\r\n" + chunk + "\r\nBB8\r\n" +
         chunk + "\r\n0\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r;
}

TEST_F(ServerTest, ARouteWithItsOwnBodyLimitTakesMoreThanTheServersFromTheRequestsItAdmits) {
  RawClient fits(server_->port());
  fits.Send("POST /upload HTTP/1.1\r\nHost: x\r\nX-Trusted: 1\r\nContent-Length: 9000\r\n\r\n" +
            std::string(9000, 'u'));
  std::string r = fits.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_NE(r.find("got 9000"), std::string::npos) << r;

  RawClient chunked(server_->port());
  std::string chunk(6000, 'z');
  chunked.Send("POST /upload HTTP/1.1\r\nHost: x\r\nX-Trusted: 1\r\nTransfer-Encoding: chunked\r\n\r\n1770\r\n" + chunk +
               "\r\n1770\r\n" + chunk + "\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.ReadResponses(1).rfind("HTTP/1.1 413", 0), 0u) << chunked.received();

  // A request the route's limit does not apply to gets the server's, before its body is read.
  RawClient untrusted(server_->port());
  untrusted.Send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n");
  EXPECT_EQ(untrusted.ReadResponses(1).rfind("HTTP/1.1 413", 0), 0u) << untrusted.received();

  // The server's limit still holds on the other routes.
  RawClient echo(server_->port());
  echo.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n");
  EXPECT_EQ(echo.ReadResponses(1).rfind("HTTP/1.1 413", 0), 0u) << echo.received();
}

// Bodies parsed ahead of the handlers pause reading at the server's body limit; once they are
// answered, reading resumes: a request sent after the first answers arrived is served too, and
// every answer comes in order.
TEST_F(ServerTest, PipelinedBodiesAtTheLimitAreServedInOrderAndReadingResumes) {
  RawClient c(server_->port());
  std::string requests = "GET /slow/50 HTTP/1.1\r\nHost: x\r\n\r\n";
  for (char tag : {'a', 'b', 'c'}) {
    requests += "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n" + std::string(4096, tag);
  }
  std::thread sender([&c, requests] { c.Send(requests); });
  ASSERT_TRUE(c.ReadUntil("slept 50"));
  sender.join();
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nlater");
  std::string r = c.ReadResponses(5);
  EXPECT_NE(r.find("later"), std::string::npos) << "the request sent after the pause was not read";
  EXPECT_EQ(Count(r, "HTTP/1.1 200"), 5) << r.substr(0, 200);
  size_t a = r.find(std::string(4096, 'a'));
  size_t b = r.find(std::string(4096, 'b'));
  size_t d = r.find(std::string(4096, 'c'));
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(d, std::string::npos);
  EXPECT_LT(r.find("slept 50"), a);
  EXPECT_LT(a, b);
  EXPECT_LT(b, d);
  EXPECT_LT(d, r.find("later"));
}

TEST_F(ServerTest, UnknownRoute404WrongMethod405) {
  RawClient c(server_->port());
  c.Send("GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadResponses(2);
  EXPECT_NE(r.find("HTTP/1.1 404 Not Found"), std::string::npos) << r;
  EXPECT_NE(r.find("HTTP/1.1 405 Method Not Allowed"), std::string::npos) << r;
  EXPECT_NE(r.find("Allow: POST"), std::string::npos) << r;
}

TEST_F(ServerTest, UnansweredHandlerGets500) {
  RawClient c(server_->port());
  c.Send("GET /forgotten HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.ReadResponses(1).rfind("HTTP/1.1 500", 0), 0u);
}

TEST_F(ServerTest, ConnectionCloseIsHonoured) {
  RawClient c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
  std::string r = c.ReadResponses(1);
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_TRUE(c.Closed());
}

TEST_F(ServerTest, ServesAfterBadClientsAndThroughLibcurl) {
  {
    RawClient bad(server_->port());
    bad.Send("\x01\x02garbage\r\n\r\n");
    bad.ReadResponses(1);
  }
  auto r = Fetch({.method = "POST", .url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/echo",
                  .body = std::string(4000, 'q')});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, std::string(4000, 'q'));
}

// Past max_connections a connection is told 503 and closed; the open ones keep being served, and
// once one closes a new connection is served again.
// A server that names requests and shapes its own errors: a client's well-formed id is kept, any
// other replaced, an absent one made; each answer carries its request's, the server's own errors
// (a route missing, a malformed request) included, in the shape the error hook gives them.
class RequestIdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Router router;
    ASSERT_TRUE(router.Add("GET", "/id", [](Request r, Responder out) { out.Send(Response::Text(200, "id=" + r.id)); }).ok());
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.request_id_header = "X-Request-Id";
    options.error_response = [](int status, const std::string& message) {
      return Response::Json(status, "{\"oops\": \"" + message + "\"}");
    };
    auto server = Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  // The X-Request-Id of the first answer in `r`.
  static std::string IdOf(const std::string& r) {
    const std::string key = "X-Request-Id: ";
    size_t at = r.find(key);
    return at == std::string::npos ? "" : r.substr(at + key.size(), r.find("\r\n", at) - at - key.size());
  }
  std::unique_ptr<Server> server_;
};

TEST_F(RequestIdTest, AWellFormedIdIsKeptAndSentBack) {
  RawClient c(server_->port());
  c.Send("GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: gw-42.a:b/c+d=\r\n\r\n");
  std::string r = c.ReadResponses(1);
  EXPECT_EQ(IdOf(r), "gw-42.a:b/c+d=") << r;
  EXPECT_NE(r.find("id=gw-42.a:b/c+d="), std::string::npos) << r;
}

TEST_F(RequestIdTest, AnAbsentOrMalformedIdIsReplacedByANewOneForEachRequest) {
  RawClient c(server_->port());
  c.Send("GET /id HTTP/1.1\r\nHost: x\r\n\r\n"
         "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: has space\r\n\r\n"
         "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + std::string(129, 'a') + "\r\n\r\n");
  std::string all = c.ReadResponses(3);
  std::vector<std::string> ids;
  for (size_t at = all.find("id="); at != std::string::npos; at = all.find("id=", at + 1)) {
    if (at > 0 && all[at - 1] != '\n') continue;  // the body's "id=", not the header's name
    ids.push_back(all.substr(at + 3, 32));
  }
  ASSERT_EQ(ids.size(), 3u) << all;
  for (const std::string& id : ids) {
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_NE(all.find("X-Request-Id: " + id + "\r\n"), std::string::npos) << all;
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(ids[1], ids[2]);
}

TEST_F(RequestIdTest, TheServersOwnErrorsHaveTheHooksShapeAndTheRequestsId) {
  RawClient routed(server_->port());
  routed.Send("GET /nowhere HTTP/1.1\r\nHost: x\r\nX-Request-Id: lost-1\r\n\r\n");
  std::string r = routed.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r;
  EXPECT_NE(r.find("{\"oops\": \"no route for /nowhere\"}"), std::string::npos) << r;
  EXPECT_EQ(IdOf(r), "lost-1");
  RawClient malformed(server_->port());
  malformed.Send("THIS IS NOT HTTP\r\n\r\n");
  r = malformed.ReadResponses(1);
  EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << r;
  EXPECT_NE(r.find("{\"oops\": \"Bad Request\"}"), std::string::npos) << r;
  EXPECT_EQ(IdOf(r).size(), 32u) << r;
}

TEST(ServerConnectionsTest, OneConnectionPastTheLimitGets503AndTheOthersAreServed) {
  Router router;
  ASSERT_TRUE(router.Add("POST", "/echo", [](Request r, Responder out) {
    out.Send(Response::Text(200, r.body));
  }).ok());
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_connections = 2;
  auto server = Server::Start(options, std::move(router));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  auto echo = [](RawClient& c, const std::string& text) {
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text);
    return c.ReadUntil(text);
  };
  auto first = std::make_unique<RawClient>(port);
  RawClient second(port);
  // Answered: both are open in the server's count.
  ASSERT_TRUE(echo(*first, "one"));
  ASSERT_TRUE(echo(second, "two"));
  {
    RawClient third(port);
    EXPECT_TRUE(third.Closed());
    EXPECT_EQ(third.received().rfind("HTTP/1.1 503", 0), 0u) << third.received();
    EXPECT_NE(third.received().find("too many connections"), std::string::npos) << third.received();
  }
  EXPECT_TRUE(echo(second, "still two"));
  first.reset();
  // The server sees the close on its loop; a connection made before that is refused, so retried.
  EXPECT_TRUE(::phos::testing::WaitUntil([&] {
    RawClient again(port);
    return echo(again, "four");
  }));
}

TEST_F(ServerTest, IdleConnectionIsClosed) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.idle_timeout_ms = 100;
  auto server = Server::Start(options, Router());
  ASSERT_TRUE(server.ok());
  RawClient c((*server)->port());
  EXPECT_TRUE(c.Closed());
}

// An answer made just before Stop (phosd's 503 to the invocations in flight when it stops) is
// still written, and the connection then closed.
TEST(ServerStopTest, AnswerMadeRightBeforeStopIsDelivered) {
  std::promise<Responder> held;
  Router router;
  ASSERT_TRUE(router.Add("GET", "/held", [&held](Request, Responder out) { held.set_value(out); }).ok());
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = Server::Start(options, std::move(router));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RawClient c((*server)->port());
  c.Send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n");
  Responder responder = held.get_future().get();
  responder.Send(Response::Text(503, "shutting down\n"));
  (*server)->Stop();
  std::string answer = c.ReadResponses(1);
  EXPECT_NE(answer.find("HTTP/1.1 503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("shutting down"), std::string::npos) << answer;
  EXPECT_TRUE(c.Closed());
}

// A streamed answer: the server waits for the handler's Responder, which the test drives.
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Router router;
    ASSERT_TRUE(router.Add("GET", "/stream", [this](Request, Responder out) { held_.set_value(out); }).ok());
    ASSERT_TRUE(router.Add("POST", "/echo", [](Request r, Responder out) {
      out.Send(Response::Text(200, r.body));
    }).ok());
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    auto server = Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  Responder Held() { return held_.get_future().get(); }

  std::promise<Responder> held_;
  std::unique_ptr<Server> server_;
};

TEST_F(StreamTest, EachChunkLeavesAsItComesAndTheConnectionServesTheNextRequest) {
  RawClient c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  Responder out = Held();
  Response head = Response::Json(200, "ignored");
  head.headers.emplace_back("X-Phos-Test", "1");
  ASSERT_TRUE(out.Begin(std::move(head)));
  ASSERT_TRUE(c.ReadUntil("\r\n\r\n"));
  EXPECT_NE(c.received().find("Transfer-Encoding: chunked\r\n"), std::string::npos) << c.received();
  EXPECT_NE(c.received().find("X-Phos-Test: 1\r\n"), std::string::npos) << c.received();
  EXPECT_EQ(c.received().find("Content-Length"), std::string::npos) << c.received();
  // Each piece arrives before the next is even made.
  out.Chunk("{\"token\": 1}\n");
  EXPECT_TRUE(c.ReadUntil("d\r\n{\"token\": 1}\n\r\n")) << c.received();
  out.Chunk("");  // skipped: an empty chunk would end the body
  out.Chunk(std::string(300, 'x'));
  EXPECT_TRUE(c.ReadUntil("12c\r\n" + std::string(300, 'x') + "\r\n")) << c.received();
  EXPECT_FALSE(out.Begin(Response::Text(500, "late")));
  out.Send(Response::Text(500, "late"));  // ignored: the request is answered
  out.End();
  out.Chunk("after the end");  // ignored
  EXPECT_TRUE(c.ReadUntil("\r\n0\r\n\r\n")) << c.received();
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nnext");
  EXPECT_TRUE(c.ReadUntil("\r\n\r\nnext")) << c.received();
  EXPECT_EQ(c.received().find("late"), std::string::npos);
  EXPECT_EQ(c.received().find("after the end"), std::string::npos);
}

TEST_F(StreamTest, AStreamLeftUnendedIsCutShort) {
  std::thread handler([this] {
    Responder out = Held();
    out.Begin(Response::Text(200, ""));
    out.Chunk("one ");
    out.Chunk("two");
    // Every copy goes here without End or Abort.
  });
  auto r = Fetch({.url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/stream"});
  handler.join();
  // curl: the transfer closed with data outstanding.
  EXPECT_FALSE(r.ok()) << "an unended stream read as whole: " << r->body;
}

// A client that asks for a stream and reads nothing: once the answer's unread bytes pass the bound,
// the server closes the connection and the stream's Responder is Gone, instead of holding all the
// stream makes. (The socket's buffers take some megabytes first; 256 MiB is far past both.)
TEST(StreamBoundTest, AClientThatDoesNotReadIsDroppedPastTheBound) {
  std::promise<Responder> held;
  Router router;
  ASSERT_TRUE(router.Add("GET", "/stream", [&held](Request, Responder out) { held.set_value(out); }).ok());
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_unsent_bytes = 1 << 20;
  auto server = Server::Start(options, std::move(router));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RawClient c((*server)->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  Responder out = held.get_future().get();
  ASSERT_TRUE(out.Begin(Response::Text(200, "")));
  const std::string piece(64 << 10, 'x');
  size_t made = 0;
  while (!out.Gone() && made < (size_t{256} << 20)) {
    out.Chunk(piece);
    made += piece.size();
  }
  EXPECT_TRUE(::phos::testing::WaitUntil([&] { return out.Gone(); })) << made << " bytes made, still not dropped";
}

TEST_F(StreamTest, AbortClosesTheConnectionWithoutTheLastChunk) {
  RawClient c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  Responder out = Held();
  out.Begin(Response::Text(200, ""));
  out.Chunk("part");
  out.Abort();
  out.End();  // ignored: already ended
  EXPECT_TRUE(c.Closed());
  const std::string& got = c.received();
  const size_t body = got.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << got;
  EXPECT_EQ(got.substr(body + 4), "4\r\npart\r\n") << "no last chunk after the abort";
}

TEST(ServerStartTest, BadListenAddressAndBusyPortFail) {
  ServerOptions options;
  options.listen = "not-an-ip:80";
  EXPECT_EQ(Server::Start(options, Router()).status().code(), StatusCode::kInvalidArgument);
  options.listen = "127.0.0.1:0";
  auto first = Server::Start(options, Router());
  ASSERT_TRUE(first.ok());
  options.listen = "127.0.0.1:" + std::to_string((*first)->port());
  EXPECT_EQ(Server::Start(options, Router()).status().code(), StatusCode::kIoError);
}

// The Unix socket: served as TCP is, alone or beside it; a stale socket file is replaced, any other
// file at the path is left alone and refused; the socket goes with the server.
TEST(ServerStartTest, AUnixSocketServesAndIsRemovedWithTheServer) {
  const std::string path = ::testing::TempDir() + "/phos-http-test-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  Router router;
  ASSERT_TRUE(router.Add("POST", "/echo", [](Request r, Responder out) { out.Send(Response::Text(200, r.body)); }).ok());
  ServerOptions options;
  options.listen = "";
  options.unix_socket = path;
  {
    auto server = Server::Start(options, std::move(router));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    EXPECT_EQ((*server)->port(), 0);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    Result<Endpoint> endpoint = ParseEndpoint("unix://" + path);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
    auto r = Fetch({.method = "POST", .url = endpoint->base_url + "/echo", .unix_socket = endpoint->unix_socket,
                    .body = "over the socket"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "over the socket");
    // A second server on the same path is refused while the first listens, and takes nothing.
    auto second = Server::Start(options, Router());
    EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status().ToString();
    auto again = Fetch({.method = "POST", .url = endpoint->base_url + "/echo", .unix_socket = endpoint->unix_socket,
                        .body = "still here"});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->body, "still here");
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the socket file stays after the server";

  // A socket file nobody listens on (a server killed before it could remove it) is replaced.
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);
  }
  {
    auto again = Server::Start(options, Router());
    EXPECT_TRUE(again.ok()) << again.status().ToString();
  }
  // Any other file is not the server's to remove.
  std::ofstream(path) << "precious\n";
  EXPECT_EQ(Server::Start(options, Router()).status().code(), StatusCode::kAlreadyExists);
  std::ifstream in(path);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "precious");
  unlink(path.c_str());
  options.unix_socket = "";
  EXPECT_EQ(Server::Start(options, Router()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ClientTest, EndpointsAreHttpHostPortOrAUnixSocketsPath) {
  Result<Endpoint> tcp = ParseEndpoint("http://127.0.0.1:7070/");
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->base_url, "http://127.0.0.1:7070");
  EXPECT_EQ(tcp->unix_socket, "");
  Result<Endpoint> v6 = ParseEndpoint("http://[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->base_url, "http://[::1]:80");
  Result<Endpoint> unix = ParseEndpoint("unix:///run/phos/api.sock");
  ASSERT_TRUE(unix.ok());
  EXPECT_EQ(unix->base_url, "http://localhost");
  EXPECT_EQ(unix->unix_socket, "/run/phos/api.sock");
  for (const std::string& bad : std::vector<std::string>{"127.0.0.1:7070", "https://h:1", "http://h:0", "http://h:1/v1", "http://u@h:1",
                                "http://", "unix://", "unix://rel.sock", "unix:///a\nb", "unix:///" + std::string(200, 'x')}) {
    Result<Endpoint> e = ParseEndpoint(bad);
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ClientTest, RefusedConnectionIsUnavailable) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  uint16_t port = 0;
  {
    auto server = Server::Start(options, Router());
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }
  auto r = Fetch({.url = "http://127.0.0.1:" + std::to_string(port) + "/"});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace phos::http
