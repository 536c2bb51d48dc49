// The libuv side of the HTTP server. One loop thread owns every connection. Requests on a
// connection are answered strictly in order (pipelining): the next parsed request is handed to
// its handler only once the previous one has been answered. Answers from other threads reach
// the loop through a queue and a uv_async_t.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "phos/base/log.h"
#include "phos/http/request_parser.h"
#include "phos/http/server.h"

namespace phos::http {

// Shared by the loop and every Responder: survives the server so that a late answer is dropped
// instead of touching freed memory.
struct Hub {
  std::mutex mu;
  bool closed = false;       // set by the loop thread before it closes `async`
  uv_async_t* async = nullptr;
  struct Done {
    enum class Kind { kWhole, kHead, kChunk, kEnd, kAbort };
    uint64_t conn_id;
    uint64_t req_id;
    Response response;  // kChunk: its body is the chunk's data
    Kind kind = Kind::kWhole;
  };
  std::vector<Done> done;
  // ServerOptions::error_response (set before any Responder exists; read-only after).
  std::function<Response(int, const std::string&)> error_response;

  Response Error(int status, const std::string& message) const {
    return error_response ? error_response(status, message) : Response::Text(status, message + "\n");
  }
};

struct Responder::State {
  std::shared_ptr<Hub> hub;
  uint64_t conn_id = 0;
  uint64_t req_id = 0;
  std::atomic<bool> sent{false};
  std::atomic<bool> streaming{false};  // Begin won: chunks may follow until End
  std::atomic<bool> ended{false};
  std::atomic<bool> gone{false};  // its connection closed (set by the loop)

  void Post(Response response, Hub::Done::Kind kind) {
    std::lock_guard lock(hub->mu);
    if (hub->closed) return;
    hub->done.push_back({conn_id, req_id, std::move(response), kind});
    uv_async_send(hub->async);
  }
  void Deliver(Response response) {
    if (sent.exchange(true)) return;
    Post(std::move(response), Hub::Done::Kind::kWhole);
  }
  bool Begin(Response head) {
    if (sent.exchange(true)) return false;
    streaming.store(true);
    head.body.clear();
    Post(std::move(head), Hub::Done::Kind::kHead);
    return true;
  }
  void Chunk(std::string data) {
    if (!streaming.load() || ended.load() || data.empty()) return;
    Response chunk;
    chunk.body = std::move(data);
    Post(std::move(chunk), Hub::Done::Kind::kChunk);
  }
  void End(Hub::Done::Kind how = Hub::Done::Kind::kEnd) {
    if (!streaming.load() || ended.exchange(true)) return;
    Post(Response{}, how);
  }
  ~State() {
    if (!sent.load()) Deliver(hub->Error(500, "handler did not answer"));
    // Nobody said the stream was whole: the client must not take it for whole.
    End(Hub::Done::Kind::kAbort);
  }
};

void Responder::Send(Response response) const { state_->Deliver(std::move(response)); }
bool Responder::Gone() const { return state_->gone.load(); }
bool Responder::Begin(Response head) const { return state_->Begin(std::move(head)); }
void Responder::Chunk(std::string data) const { state_->Chunk(std::move(data)); }
void Responder::End() const { state_->End(); }
void Responder::Abort() const { state_->End(Hub::Done::Kind::kAbort); }

namespace {

struct Pending {
  Request request;
  bool keep_alive = true;
  int error_status = 0;  // non-zero: answer this status and close instead of routing
};

// Whether a client's request id may be kept as it is: 1 to 128 characters of [A-Za-z0-9._:+/=-],
// so that it is safe in a header, a log line and a file name.
bool WellFormedRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("._:+/=-").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// The whole response, or (chunked) its head alone, the body to follow in chunks.
std::string Serialize(const Response& r, bool close, bool chunked = false) {
  std::string out;
  out.reserve(r.body.size() + 160);
  out += "HTTP/1.1 " + std::to_string(r.status) + " ";
  out += ReasonPhrase(r.status);
  out += "\r\nContent-Type: " + r.content_type;
  out += chunked ? "\r\nTransfer-Encoding: chunked\r\n" : "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  if (!chunked) out += r.body;
  return out;
}

std::string ChunkOf(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

class Server::Impl {
 public:
  struct Connection {
    Impl* server = nullptr;
    uint64_t id = 0;
    // A TCP connection, or one on the Unix socket (ServerOptions::unix_socket): one stream.
    union {
      uv_tcp_t tcp;
      uv_pipe_t pipe;
    } handle{};
    uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&handle); }
    uv_timer_t idle{};
    std::unique_ptr<RequestParser> parser;
    int open_handles = 2;
    int writes = 0;  // uv_write calls not yet completed
    size_t unsent = 0;  // their bytes
    bool closing = false;
    bool reading = false;
    bool read_error = false;   // parsing stopped for good
    // Answer state.
    std::deque<Pending> pending;
    size_t pending_body_bytes = 0;  // of the requests in `pending`
    bool in_flight = false;
    uint64_t in_flight_req = 0;
    bool in_flight_keep_alive = true;
    std::string in_flight_id;  // its request id (ServerOptions::request_id_header), sent back
    std::weak_ptr<Responder::State> in_flight_state;  // told when the connection closes (Gone)
  };

  Impl(ServerOptions options, Router router) : options_(std::move(options)), router_(std::move(router)) {}

  Status Listen() {
    if (options_.listen.empty() && options_.unix_socket.empty()) {
      return Status::InvalidArgument("nothing to listen on: neither an address nor a Unix socket");
    }
    std::pair<std::string, uint16_t> host_port;
    if (!options_.listen.empty()) {
      PHOS_ASSIGN_OR_RETURN(host_port, ParseHostPort(options_.listen));
    }
    uv_loop_init(&loop_);
    loop_ready_ = true;
    hub_ = std::make_shared<Hub>();
    hub_->error_response = options_.error_response;
    hub_->async = &done_async_;
    uv_async_init(&loop_, &done_async_, OnDone);
    done_async_.data = this;
    uv_async_init(&loop_, &stop_async_, OnStop);
    stop_async_.data = this;
    if (!options_.listen.empty()) PHOS_RETURN_IF_ERROR(ListenTcp(host_port));
    if (!options_.unix_socket.empty()) PHOS_RETURN_IF_ERROR(ListenUnix());
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
    started_ = true;
    return Status::Ok();
  }

  Status ListenTcp(const std::pair<std::string, uint16_t>& host_port) {
    uv_tcp_init(&loop_, &listener_);
    tcp_listener_open_ = true;
    listener_.data = this;
    sockaddr_storage addr{};
    int rc = uv_ip4_addr(host_port.first.c_str(), host_port.second, reinterpret_cast<sockaddr_in*>(&addr));
    if (rc != 0) rc = uv_ip6_addr(host_port.first.c_str(), host_port.second, reinterpret_cast<sockaddr_in6*>(&addr));
    if (rc != 0) return Status::InvalidArgument("listen address '" + options_.listen + "': not an IP address");
    rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&addr), 0);
    if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 128, OnConnection);
    if (rc != 0) {
      return Status::IoError("listen on " + options_.listen + ": " + uv_strerror(rc));
    }
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    PHOS_LOG(Info, "http", "listening on {} (port {})", options_.listen, port_);
    return Status::Ok();
  }

  // Whether a server accepts connections on the Unix socket at `path` (a socket file nobody
  // listens on refuses them: a server that ended without removing it).
  static bool SomeoneListensOn(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());  // the caller checked the length
    const bool listening = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return listening;
  }

  // The Unix socket: a stale socket file at the path (a server before this one that did not remove
  // it) is replaced; one a server listens on, or any other file, is an error. Made with mode 0660,
  // so the owner's user and group may connect.
  Status ListenUnix() {
    const std::string& path = options_.unix_socket;
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return Status::InvalidArgument("unix socket path '" + path + "': longer than " +
                                     std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
    }
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return Status::AlreadyExists("unix socket path '" + path + "': a file that is no socket");
      if (SomeoneListensOn(path)) return Status::AlreadyExists("unix socket " + path + ": another server listens on it");
      if (unlink(path.c_str()) != 0) return Status::FromErrno(errno, "remove the stale socket " + path);
    }
    uv_pipe_init(&loop_, &unix_listener_, 0);
    unix_listener_open_ = true;
    unix_listener_.data = this;
    int rc = uv_pipe_bind(&unix_listener_, path.c_str());
    if (rc == 0) unix_bound_ = true;  // the file is this server's from here: removed with it, even on failure
    if (rc == 0 && chmod(path.c_str(), 0660) != 0) rc = -errno;
    if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(&unix_listener_), 128, OnConnection);
    if (rc != 0) return Status::IoError("listen on unix socket " + path + ": " + uv_strerror(rc));
    PHOS_LOG(Info, "http", "listening on unix socket {}", path);
    return Status::Ok();
  }

  ~Impl() {
    Stop();
    if (loop_ready_ && !thread_started_ok()) {
      // Listen() failed after the loop was set up: close what exists and drain.
      CloseLoopHandles();
      uv_run(&loop_, UV_RUN_DEFAULT);
    }
    if (loop_ready_) uv_loop_close(&loop_);
  }

  void Stop() {
    if (!thread_.joinable()) return;
    uv_async_send(&stop_async_);
    thread_.join();
  }

  uint16_t port() const { return port_; }

 private:
  bool thread_started_ok() const { return started_; }

  void CloseLoopHandles() {
    {
      std::lock_guard lock(hub_->mu);
      hub_->closed = true;
      hub_->async = nullptr;
    }
    uv_close(reinterpret_cast<uv_handle_t*>(&done_async_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&stop_async_), nullptr);
    if (tcp_listener_open_) uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
    if (unix_listener_open_) uv_close(reinterpret_cast<uv_handle_t*>(&unix_listener_), nullptr);
    // The socket file goes with the server (the next one would remove it anyway).
    if (unix_bound_) unlink(options_.unix_socket.c_str());
    unix_bound_ = false;
  }

  // Stops gracefully: answers already made (a handler that responded just before the stop, e.g.
  // phosd's 503 to invocations in flight) are written first, each connection closes once its
  // writes are done, and the loop ends when the last one has.
  static void OnStop(uv_async_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    self->stopping_ = true;
    OnDone(&self->done_async_);
    // Close() erases from connections_: iterate over a copy.
    std::vector<Connection*> open;
    for (auto& [id, conn] : self->connections_) open.push_back(conn);
    for (Connection* conn : open) {
      if (conn->writes == 0) self->Close(conn);  // else OnWritten closes it
    }
    self->CloseLoopHandles();
  }

  static void OnConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<Impl*>(listener->data);
    if (status < 0) {
      PHOS_LOG_EVERY_SEC(Warn, "http", 1, "accept failed: {}", uv_strerror(status));
      return;
    }
    if (self->connections_.size() >= self->options_.max_connections) {
      RefuseConnection(self, listener);
      return;
    }
    auto* conn = new Connection;
    conn->server = self;
    conn->id = ++self->next_conn_id_;
    const bool on_unix = listener->type == UV_NAMED_PIPE;
    if (on_unix) {
      uv_pipe_init(&self->loop_, &conn->handle.pipe, 0);
    } else {
      uv_tcp_init(&self->loop_, &conn->handle.tcp);
    }
    uv_timer_init(&self->loop_, &conn->idle);
    conn->stream()->data = conn;
    conn->idle.data = conn;
    conn->parser = std::make_unique<RequestParser>(RequestParser::Limits{
        .max_header_bytes = self->options_.max_header_bytes,
        .max_body_bytes = self->options_.max_body_bytes,
        .body_limit_for = [router = &self->router_](const Request& head) -> size_t {
          Router::Match match = router->Find(head.method, head.path);
          if (match.kind != Router::MatchKind::kFound) return 0;
          if (match.body_limit_applies != nullptr && !(*match.body_limit_applies)(head)) return 0;
          return match.max_body_bytes;
        }});
    self->connections_[conn->id] = conn;
    if (uv_accept(listener, conn->stream()) != 0) {
      self->Close(conn);
      return;
    }
    if (!on_unix) uv_tcp_nodelay(&conn->handle.tcp, 1);
    self->StartReading(conn);
    self->ArmIdle(conn);
  }

  // One connection past max_connections: accepted only to be told 503 and closed, so the client
  // sees why (the listen backlog would leave it waiting).
  static void RefuseConnection(Impl* self, uv_stream_t* listener) {
    union Refused {
      uv_tcp_t tcp;
      uv_pipe_t pipe;
    };
    auto* refused = new Refused{};
    if (listener->type == UV_NAMED_PIPE) {
      uv_pipe_init(&self->loop_, &refused->pipe, 0);
    } else {
      uv_tcp_init(&self->loop_, &refused->tcp);
    }
    auto close = [](uv_handle_t* h) { delete reinterpret_cast<Refused*>(h); };
    if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(refused)) == 0) {
      const std::string busy = Serialize(self->hub_->Error(503, "too many connections"), true);
      uv_buf_t buf = uv_buf_init(const_cast<char*>(busy.data()), static_cast<unsigned>(busy.size()));
      uv_try_write(reinterpret_cast<uv_stream_t*>(refused), &buf, 1);  // best effort: it is closed anyway
    }
    uv_close(reinterpret_cast<uv_handle_t*>(refused), close);
    PHOS_LOG_EVERY_SEC(Warn, "http", 10, "refused a connection: {} are open (the limit)", self->connections_.size());
  }

  void ArmIdle(Connection* conn) {
    if (options_.idle_timeout_ms == 0) return;
    uv_timer_start(&conn->idle, OnIdle, options_.idle_timeout_ms, 0);
  }

  static void OnIdle(uv_timer_t* timer) {
    auto* conn = static_cast<Connection*>(timer->data);
    if (conn->in_flight || !conn->pending.empty()) {
      conn->server->ArmIdle(conn);  // a handler is still working: not idle
      return;
    }
    conn->server->Close(conn);
  }

  void StartReading(Connection* conn) {
    if (conn->reading || conn->closing || conn->read_error) return;
    conn->reading = true;
    uv_read_start(conn->stream(), OnAlloc, OnRead);
  }

  void StopReading(Connection* conn) {
    if (!conn->reading) return;
    conn->reading = false;
    uv_read_stop(conn->stream());
  }

  static void OnAlloc(uv_handle_t*, size_t suggested, uv_buf_t* buf) {
    buf->base = new char[suggested];
    buf->len = suggested;
  }

  static void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    std::unique_ptr<char[]> owned(buf->base);
    auto* conn = static_cast<Connection*>(stream->data);
    Impl* self = conn->server;
    if (nread < 0) {
      self->Close(conn);
      return;
    }
    if (nread == 0) return;
    self->ArmIdle(conn);
    std::vector<ParsedRequest> parsed;
    const int status = conn->parser->Feed(buf->base, static_cast<size_t>(nread), &parsed);
    for (ParsedRequest& r : parsed) {
      conn->pending_body_bytes += r.request.body.size();
      conn->pending.push_back({std::move(r.request), r.keep_alive, 0});
    }
    if (status != 0) {
      PHOS_LOG(Debug, "http", "connection {}: {} ({})", conn->id, status, conn->parser->error_description());
      conn->read_error = true;
      self->StopReading(conn);
      Pending p;
      p.error_status = status;
      conn->pending.push_back(std::move(p));
      self->Dispatch(conn);
      return;
    }
    if (conn->parser->stopped()) {
      // Nothing after a "Connection: close" request is read.
      conn->read_error = true;
      self->StopReading(conn);
    }
    if (self->HoldsEnoughAhead(conn)) self->StopReading(conn);
    self->Dispatch(conn);
  }

  // The id of `request` (ServerOptions::request_id_header): the client's if well formed, else a
  // new one; empty when the server keeps none.
  std::string RequestIdOf(const Request& request) {
    if (options_.request_id_header.empty()) return {};
    if (const std::string* given = request.Header(options_.request_id_header); given && WellFormedRequestId(*given)) {
      return *given;
    }
    char id[33];
    std::snprintf(id, sizeof id, "%016llx%016llx", static_cast<unsigned long long>(random_()),
                  static_cast<unsigned long long>(random_()));
    return id;
  }
  // Adds the in-flight request's id to its answer, unless the handler set that header itself.
  void WithRequestId(Connection* conn, Response* r) const {
    if (options_.request_id_header.empty() || conn->in_flight_id.empty()) return;
    for (const auto& [name, value] : r->headers) {
      if (name == options_.request_id_header) return;
    }
    r->headers.emplace_back(options_.request_id_header, conn->in_flight_id);
  }

  // Hands the next parsed request to its handler once the previous one has been answered.
  void Dispatch(Connection* conn) {
    while (!conn->closing && !conn->in_flight && !conn->pending.empty()) {
      Pending p = std::move(conn->pending.front());
      conn->pending.pop_front();
      conn->pending_body_bytes -= p.request.body.size();
      conn->in_flight_id = RequestIdOf(p.request);
      if (p.error_status != 0) {
        Response refused = hub_->Error(p.error_status, std::string(ReasonPhrase(p.error_status)));
        WithRequestId(conn, &refused);
        Write(conn, Serialize(refused, true), true);
        conn->pending.clear();
        conn->pending_body_bytes = 0;
        return;
      }
      conn->in_flight = true;
      conn->in_flight_req = ++next_req_id_;
      conn->in_flight_keep_alive = p.keep_alive;
      auto state = std::make_shared<Responder::State>();
      state->hub = hub_;
      state->conn_id = conn->id;
      state->req_id = conn->in_flight_req;
      conn->in_flight_state = state;
      Responder responder(std::move(state));
      p.request.id = conn->in_flight_id;
      Router::Match match = router_.Find(p.request.method, p.request.path);
      if (match.kind == Router::MatchKind::kNoRoute) {
        responder.Send(hub_->Error(404, "no route for " + p.request.path));
      } else if (match.kind == Router::MatchKind::kWrongMethod) {
        Response r = hub_->Error(405, p.request.method + " not allowed on " + p.request.path);
        r.headers.emplace_back("Allow", match.allow);
        responder.Send(std::move(r));
      } else {
        p.request.params = std::move(match.params);
        (*match.handler)(std::move(p.request), responder);
      }
      if (conn->reading == false && !conn->read_error && !HoldsEnoughAhead(conn)) {
        StartReading(conn);
      }
    }
  }

  // Requests parsed ahead of the handlers: reading pauses at max_pipelined of them, or once their
  // bodies hold max_body_bytes.
  bool HoldsEnoughAhead(const Connection* conn) const {
    return conn->pending.size() >= options_.max_pipelined || conn->pending_body_bytes >= options_.max_body_bytes;
  }

  static void OnDone(uv_async_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    std::vector<Hub::Done> done;
    {
      std::lock_guard lock(self->hub_->mu);
      done.swap(self->hub_->done);
    }
    for (Hub::Done& d : done) {
      auto it = self->connections_.find(d.conn_id);
      if (it == self->connections_.end()) continue;  // the client went away
      Connection* conn = it->second;
      if (!conn->in_flight || conn->in_flight_req != d.req_id || conn->closing) continue;
      const bool close = !conn->in_flight_keep_alive || self->stopping_;
      switch (d.kind) {
        case Hub::Done::Kind::kHead:
          // Closing is decided now: the head says so, and the end closes.
          conn->in_flight_keep_alive = !close;
          self->WithRequestId(conn, &d.response);
          self->Write(conn, Serialize(d.response, close, /*chunked=*/true), false);
          continue;
        case Hub::Done::Kind::kChunk:
          if (self->options_.max_unsent_bytes != 0 &&
              conn->unsent + d.response.body.size() > self->options_.max_unsent_bytes) {
            // A client that does not read what it asked to stream: dropped, its stream Gone.
            PHOS_LOG_EVERY_SEC(Warn, "http", 1, "connection {}: more than {} bytes of a streamed answer unread; closed",
                               conn->id, self->options_.max_unsent_bytes);
            self->Close(conn);
            continue;
          }
          self->Write(conn, ChunkOf(d.response.body), false);
          continue;
        case Hub::Done::Kind::kEnd:
          conn->in_flight = false;
          self->Write(conn, "0\r\n\r\n", close);
          break;
        case Hub::Done::Kind::kAbort:
          conn->in_flight = false;
          self->Write(conn, std::string(), /*close_after=*/true);
          continue;
        case Hub::Done::Kind::kWhole:
          conn->in_flight = false;
          self->WithRequestId(conn, &d.response);
          self->Write(conn, Serialize(d.response, close), close);
          break;
      }
      if (!close) {
        self->ArmIdle(conn);
        self->Dispatch(conn);
      }
    }
  }

  struct WriteOp {
    uv_write_t req{};
    std::string data;
    Connection* conn = nullptr;
    bool close_after = false;
  };

  void Write(Connection* conn, std::string data, bool close_after) {
    auto* op = new WriteOp;
    op->data = std::move(data);
    op->conn = conn;
    op->close_after = close_after;
    if (close_after) StopReading(conn);
    uv_buf_t buf = uv_buf_init(op->data.data(), static_cast<unsigned>(op->data.size()));
    int rc = uv_write(&op->req, conn->stream(), &buf, 1, OnWritten);
    if (rc != 0) {
      delete op;
      Close(conn);
      return;
    }
    ++conn->writes;
    conn->unsent += op->data.size();
  }

  static void OnWritten(uv_write_t* req, int status) {
    std::unique_ptr<WriteOp> op(reinterpret_cast<WriteOp*>(req));
    Connection* conn = op->conn;
    --conn->writes;
    conn->unsent -= op->data.size();
    if (status < 0 || op->close_after || (conn->server->stopping_ && conn->writes == 0)) conn->server->Close(conn);
  }

  void Close(Connection* conn) {
    if (conn->closing) return;
    conn->closing = true;
    if (auto state = conn->in_flight_state.lock()) state->gone.store(true);
    connections_.erase(conn->id);
    uv_close(reinterpret_cast<uv_handle_t*>(conn->stream()), OnClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&conn->idle), OnClosed);
  }

  static void OnClosed(uv_handle_t* handle) {
    auto* conn = static_cast<Connection*>(handle->data);
    if (--conn->open_handles == 0) delete conn;
  }

  ServerOptions options_;
  std::mt19937_64 random_{std::random_device{}()};  // request ids; the loop thread's alone
  Router router_;
  uv_loop_t loop_{};
  bool loop_ready_ = false;
  uv_tcp_t listener_{};
  uv_pipe_t unix_listener_{};
  bool tcp_listener_open_ = false;   // listener_ initialised (closed with the loop)
  bool unix_listener_open_ = false;  // unix_listener_ initialised
  bool unix_bound_ = false;          // the socket file is this server's
  bool started_ = false;             // Listen() succeeded: the loop thread runs
  uv_async_t done_async_{};
  uv_async_t stop_async_{};
  std::shared_ptr<Hub> hub_;
  std::thread thread_;
  uint16_t port_ = 0;
  uint64_t next_conn_id_ = 0;
  bool stopping_ = false;  // Stop was asked: answer what is done, close, accept nothing more
  uint64_t next_req_id_ = 0;
  std::unordered_map<uint64_t, Connection*> connections_;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }
uint16_t Server::port() const { return impl_->port(); }
void Server::Stop() { impl_->Stop(); }

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Router router) {
  auto impl = std::make_unique<Impl>(options, std::move(router));
  PHOS_RETURN_IF_ERROR(impl->Listen().WithContext("http server"));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

}  // namespace phos::http
