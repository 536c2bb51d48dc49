#include "phos/runtime/api_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ipc/control.h"
#include "session.h"

namespace phos::runtime {

class ApiServer::Impl {
 public:
  Impl(const ApiServerOptions& options, DriverTable* driver, int listen_fd, int wake_fd)
      : options_(options), driver_(driver), listen_fd_(listen_fd), wake_fd_(wake_fd) {}

  // The pool sessions lease from: the caller's, or a private one.
  Status OpenContextPool() {
    if (options_.context_pool != nullptr) {
      pool_ = options_.context_pool;
      return Status::Ok();
    }
    PHOS_ASSIGN_OR_RETURN(own_pool_, ctxpool::ContextPool::Open({.device = options_.device, .min_ready = 0, .max_contexts = 1024}, driver_));
    pool_ = own_pool_.get();
    return Status::Ok();
  }

  ~Impl() {
    stop_ = true;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    if (acceptor_.joinable()) acceptor_.join();
    std::map<std::string, std::unique_ptr<Session>> sessions;
    {
      std::lock_guard lock(mu_);
      sessions.swap(sessions_);
    }
    sessions.clear();
    close(listen_fd_);
    close(wake_fd_);
    unlink(options_.socket_path.c_str());
  }

  void StartAcceptor() { acceptor_ = std::thread([this] { Loop(); }); }

  // The device groups sessions of several GPUs lease: the caller's, or a private pool (nothing
  // made ahead). Failures leave the server without them, said once in the log.
  void OpenDeviceGroups() {
    if (options_.device_groups != nullptr) {
      groups_ = options_.device_groups;
      return;
    }
    if (!driver_->has_nccl()) {
      PHOS_LOG(Warn, "runtime", "no NCCL in the driver table: sessions of several GPUs are refused");
      return;
    }
    Result<std::unique_ptr<ctxpool::CommunicatorPool>> pool = ctxpool::CommunicatorPool::Open({.min_ready = 0}, driver_);
    if (!pool.ok()) {
      PHOS_LOG(Warn, "runtime", "sessions of several GPUs are refused: {}", pool.status().message());
      return;
    }
    own_groups_ = std::move(*pool);
    groups_ = own_groups_.get();
  }

  std::string IssueToken(int gpus) {
    std::string token = ipc::NewToken();
    std::lock_guard lock(mu_);
    tokens_[token] = std::max(gpus, 1);
    return token;
  }

  void EndSession(const std::string& token) {
    std::unique_ptr<Session> ended;
    {
      std::lock_guard lock(mu_);
      tokens_.erase(token);
      auto it = sessions_.find(token);
      if (it == sessions_.end()) return;
      ended = std::move(it->second);
      sessions_.erase(it);
    }
    ended.reset();  // joins the executor and frees the session's GPU state, outside the lock
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  size_t session_count() const {
    std::lock_guard lock(mu_);
    return sessions_.size();
  }

  const ApiServerOptions& options() const { return options_; }

 private:
  void Loop() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      std::vector<std::string> tokens;
      {
        std::lock_guard lock(mu_);
        for (auto& [token, s] : sessions_) {
          fds.push_back({s->control_fd(), POLLIN, 0});
          tokens.push_back(token);
        }
      }
      if (poll(fds.data(), fds.size(), 1000) < 0) continue;
      if ((fds[1].revents & POLLIN) != 0) {
        uint64_t v;
        [[maybe_unused]] ssize_t n = read(wake_fd_, &v, sizeof(v));
      }
      // A readable or hung-up control socket of an open session: the frontend closed it (the
      // protocol sends nothing after the hello) or sent garbage; either way the session ends.
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) {
          PHOS_LOG(Info, "runtime", "control socket of a session closed; ending it");
          EndSession(tokens[i - 2]);
        }
      }
      if ((fds[0].revents & POLLIN) != 0) Accept();
    }
  }

  void Refuse(int fd, int32_t status, const std::string& why) {
    PHOS_LOG(Warn, "runtime", "GPU session refused: {}", why);
    ipc::Answer answer = ipc::MakeAnswer(status, why, 0);
    SendDatagram(fd, &answer, sizeof(answer)).IgnoreError();
    close(fd);
  }

  void Accept() {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    // A client that connects and never says hello must not hold up the acceptor.
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    alignas(8) uint8_t buf[sizeof(ipc::Hello)];
    int passed = -1;
    Result<size_t> n = ipc::ReceiveDatagram(fd, buf, sizeof(buf), &passed);
    if (passed >= 0) close(passed);
    if (!n.ok()) return Refuse(fd, 1, fmt::format("bad hello: {}", n.status().message()));
    std::string token;
    if (Status s = ipc::CheckHello(buf, *n, &token); !s.ok()) return Refuse(fd, 1, s.message());
    ipc::Hello hello;
    std::memcpy(&hello, buf, sizeof(hello));
    int gpus = 1;
    {
      std::lock_guard lock(mu_);
      auto it = tokens_.find(token);
      if (it == tokens_.end()) return Refuse(fd, 1, "unknown instance token");
      if (sessions_.count(token) != 0) return Refuse(fd, 1, "instance token already has a GPU session");
      gpus = it->second;
    }
    if (gpus > 1 && groups_ == nullptr) {
      return Refuse(fd, 999, fmt::format("a session of {} GPUs needs device groups, and this phosd has none (no NCCL)", gpus));
    }
    Result<std::unique_ptr<ipc::Ring>> ring = ipc::Ring::Create(options_.ring_bytes, options_.reply_bytes);
    if (!ring.ok()) return Refuse(fd, 999, ring.status().message());
    int ring_fd = (*ring)->fd();
    uint64_t ring_bytes = (*ring)->mapped_bytes();
    Result<std::unique_ptr<Session>> session = Status::Internal("unset");
    if (gpus > 1) {
      // The group is leased by the session's executor (it may have to wait for the refill).
      session = Session::OpenWithGroup(driver_, groups_, gpus, std::move(*ring), token, fd, hello.pid);
    } else {
      Result<ctxpool::ContextLease> lease = pool_->Lease();
      if (!lease.ok()) return Refuse(fd, 999, lease.status().WithContext("GPU session").message());
      session = Session::Open(driver_, std::move(*lease), options_.device, options_.instance_va_bytes, std::move(*ring), token,
                              fd, hello.pid);
    }
    if (!session.ok()) return Refuse(fd, 999, session.status().message());
    // Registered before the answer: once the frontend has its ring, EndSession(token) must find
    // the session.
    {
      std::lock_guard lock(mu_);
      sessions_[token] = std::move(*session);
    }
    ipc::Answer answer = ipc::MakeAnswer(0, "", ring_bytes);
    if (Status s = ipc::SendDatagram(fd, &answer, sizeof(answer), ring_fd); !s.ok()) {
      PHOS_LOG(Warn, "runtime", "answer to pid {} failed: {}", hello.pid, s.message());
      std::unique_ptr<Session> unanswered;
      {
        std::lock_guard lock(mu_);
        auto it = sessions_.find(token);
        if (it != sessions_.end()) {
          unanswered = std::move(it->second);
          sessions_.erase(it);
        }
      }
      // the session (and the socket it owns) goes away here, outside the lock
    }
  }

  ApiServerOptions options_;
  DriverTable* driver_;
  // Declared before the sessions: destroyed after them (leases may outlive a pool, but need not).
  std::unique_ptr<ctxpool::ContextPool> own_pool_;
  ctxpool::ContextPool* pool_ = nullptr;
  // Declared before the sessions: destroyed after them (sessions return their groups to it).
  std::unique_ptr<ctxpool::CommunicatorPool> own_groups_;
  ctxpool::CommunicatorPool* groups_ = nullptr;
  int listen_fd_;
  int wake_fd_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::map<std::string, int> tokens_;  // token -> GPUs of its session
  std::map<std::string, std::unique_ptr<Session>> sessions_;
};

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServer::~ApiServer() = default;

Result<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options, DriverTable* driver) {
  if (driver == nullptr) return Status::InvalidArgument("ApiServer needs a driver table");
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  PHOS_ASSIGN_OR_RETURN(int listen_fd, ipc::ListenSeqpacket(options.socket_path));
  int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return Status::FromErrno(errno, "eventfd");
  }
  auto impl = std::make_unique<Impl>(options, driver, listen_fd, wake_fd);
  if (Status s = impl->OpenContextPool(); !s.ok()) return s.WithContext("API server");
  impl->OpenDeviceGroups();
  impl->StartAcceptor();
  PHOS_LOG(Info, "runtime", "API server listening on {}", options.socket_path);
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

std::string ApiServer::IssueToken(int gpus) { return impl_->IssueToken(gpus); }
void ApiServer::EndSession(const std::string& token) { impl_->EndSession(token); }
size_t ApiServer::session_count() const { return impl_->session_count(); }
const std::string& ApiServer::socket_path() const { return impl_->options().socket_path; }

}  // namespace phos::runtime
