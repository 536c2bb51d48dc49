// HTTP/1.1 server on libuv and http-parser: keep-alive, pipelining, Content-Length and chunked
// request bodies, size limits (431, 413), malformed requests (400, then close), a router with path
// parameters, and asynchronous handlers that may answer later from any thread, whole or streamed
// in chunks.
//
//   phos::http::Router router;
//   router.Add("POST", "/v1/functions/{name}/invoke", [](Request req, Responder out) {
//     out.Send(Response::Text(200, "hello " + std::string(req.Param("name"))));
//   });
//   auto server = phos::http::Server::Start(options, std::move(router));
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string query;   // after '?', undecoded; empty when absent
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;    // de-chunked
  // Path parameters of the matched route ("{name}" -> value).
  std::vector<std::pair<std::string, std::string>> params;
  // The request's id (ServerOptions::request_id_header): the client's when well formed, else one
  // the server made. Empty when the server keeps none.
  std::string id;

  // The first header of that name (case-insensitive), or nullptr.
  const std::string* Header(std::string_view name) const;
  // The value of a path parameter, or "" when the route has none of that name.
  std::string_view Param(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;

  static Response Text(int status, std::string body);
  static Response Json(int status, std::string body);
};

// The standard reason phrase of a status code ("Not Found"), or "Unknown".
std::string_view ReasonPhrase(int status);

// Answers one request, exactly once, from any thread. Copies share the same request: the first
// Send (or Begin) wins and later ones are ignored. If every copy is destroyed unanswered, the
// client gets 500 (a handler that forgets to answer must not hang the connection).
//
// A streamed answer: Begin(head) sends the status line and headers (head.body is ignored) with
// Transfer-Encoding: chunked, each Chunk one HTTP chunk as it comes (an empty one is skipped: it
// would end the body), End the last chunk; the connection then serves its next request. Chunks
// and End must come in order (from one thread, or ordered by the caller). A streamed answer whose
// copies are all destroyed before End is aborted (see Abort).
class Responder {
 public:
  struct State;
  explicit Responder(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void Send(Response response) const;
  // False when the request was already answered (the head is dropped).
  bool Begin(Response head) const;
  void Chunk(std::string data) const;
  void End() const;
  // Ends a streamed answer as failed: the connection is closed once the chunks sent are written,
  // without the last chunk, so the client sees the body cut short.
  void Abort() const;
  // The client went away (its connection closed): nothing sent from now on reaches it. An answer
  // that streams for as long as the client listens stops here.
  bool Gone() const;

 private:
  std::shared_ptr<State> state_;
};

using Handler = std::function<void(Request request, Responder responder)>;

// Routes "METHOD /path/{param}/..." patterns; a segment "{x}" matches one non-empty segment.
class Router {
 public:
  // Which requests of a route get its own body limit, judged from the request line and headers
  // alone (before any byte of the body is read); the others get the server's.
  using BodyLimitApplies = std::function<bool(const Request& head)>;
  // Fails on a malformed pattern or a duplicate (method, pattern). `max_body_bytes` is the route's
  // own limit on a request body (more is 413), in place of the server's, for the requests
  // `applies` accepts (unset: all of them); 0 keeps the server's.
  Status Add(std::string method, std::string pattern, Handler handler, size_t max_body_bytes = 0,
             BodyLimitApplies applies = {});

  enum class MatchKind { kFound, kNoRoute, kWrongMethod };
  struct Match {
    MatchKind kind = MatchKind::kNoRoute;
    const Handler* handler = nullptr;
    std::vector<std::pair<std::string, std::string>> params;
    std::string allow;  // for kWrongMethod: the methods the path accepts, "GET, POST"
    size_t max_body_bytes = 0;  // for kFound: the route's body limit, 0 for the server's
    const BodyLimitApplies* body_limit_applies = nullptr;  // for kFound: unset, or to which requests
  };
  Match Find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    Handler handler;
    size_t max_body_bytes = 0;
    BodyLimitApplies body_limit_applies;
  };
  std::vector<Route> routes_;
};

struct ServerOptions {
  // "HOST:PORT" to listen on (IPv4 or IPv6 literal, "[::1]:80"); port 0 picks a free port, see
  // Server::port(). Empty: no TCP listener (unix_socket must be set). Default: 127.0.0.1:7070.
  std::string listen = "127.0.0.1:7070";
  // A Unix socket to listen on as well: its path, made with mode 0660 (its owner's user and group
  // may connect; a socket file there nobody listens on is replaced, one a server listens on or any
  // other file is an error) and removed when the server stops. Clients reach it as unix:///PATH (ParseEndpoint). Empty: none. Default:
  // empty.
  std::string unix_socket;
  // Limit on the request line plus all headers; more is answered 431. Default: 16 KiB.
  size_t max_header_bytes = 16 * 1024;
  // Limit on a request body after de-chunking, for routes without their own (Router::Add); more
  // is answered 413. A connection reads no further while the bodies of requests parsed ahead of
  // its handlers (pipelining) hold this much. Default: 64 MiB.
  size_t max_body_bytes = 64 * 1024 * 1024;
  // Connections open at once; one more is answered 503 (best effort: written once, without
  // waiting for the client to read it) and closed. Default: 1024.
  size_t max_connections = 1024;
  // Bytes of a streamed answer a connection may hold written but not yet taken by the client
  // (its socket full); past it the connection is closed and the answer's Responder is Gone(): a
  // client that stops reading cannot make the server hold without bound what a stream makes for
  // it. 0: no bound. Default: 16 MiB.
  size_t max_unsent_bytes = size_t{16} << 20;
  // A connection with no request in progress and no bytes received for this long is closed.
  // Default: 60000 ms.
  uint32_t idle_timeout_ms = 60000;
  // Requests parsed ahead on one connection (pipelining) before reading pauses. Default: 16.
  size_t max_pipelined = 16;
  // A header naming each request ("X-Request-Id"): a client's value of 1 to 128 characters of
  // [A-Za-z0-9._:+/=-] is kept, anything else replaced by 32 random hex digits; either is the
  // Request's `id` and is sent back in that header on every answer to the request, the server's
  // own errors included. Empty: none. Default: empty.
  std::string request_id_header;
  // The answer to the server's own errors (a malformed request 400, 404 and 405 from the router,
  // 413, 431, 503 for a connection too many, 500 for a handler that never answered), from the
  // status and what went wrong. Unset: plain text. Default: unset.
  std::function<Response(int status, const std::string& message)> error_response;
};

// The server runs its own event-loop thread. Handlers are called on that thread and must not
// block; long work answers later through the Responder.
class Server {
 public:
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options, Router router);
  ~Server();  // Stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound port (useful with port 0); 0 without a TCP listener.
  uint16_t port() const;
  // Stops accepting, closes every connection, joins the loop thread. Idempotent; any thread but
  // the loop thread.
  void Stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "HOST:PORT" ("[v6]:PORT" for IPv6). Fails on a missing or out-of-range port.
Result<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view listen);

}  // namespace phos::http
