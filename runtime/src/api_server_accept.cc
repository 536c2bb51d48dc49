// The API server's acceptor, session openers and reaper (api_server_impl.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "api_server_impl.h"

namespace phos::runtime {

// The acceptor only accepts, reads hellos that have arrived and notices closed control sockets:
// nothing it does waits. A hello that does not come within options_.hello_timeout, or a
// connection beyond options_.max_pending_hellos, is refused; what opening a session waits for
// (a pooled context, a created one, a restore) happens on that session's opener thread.
void ApiServer::Impl::Loop() {
  while (!stop_) {
    JoinFinishedOpeners();
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    for (const Greeting& g : greeting_) fds.push_back({g.fd, POLLIN, 0});
    const size_t first_session = fds.size();
    std::vector<std::string> tokens;
    {
      std::lock_guard lock(mu_);
      for (auto& [token, s] : sessions_) {
        if (closed_.count(token) != 0) continue;  // the reaper ends it
        fds.push_back({s->control_fd(), POLLIN, 0});
        tokens.push_back(token);
      }
    }
    if (poll(fds.data(), fds.size(), PollTimeoutMs()) < 0) continue;
    ExpireUnclaimedTokens();
    if ((fds[1].revents & POLLIN) != 0) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &v, sizeof(v));
    }
    // Hellos that arrived, and connections whose time to say hello is up.
    const auto now = std::chrono::steady_clock::now();
    std::vector<Greeting> waiting;
    for (size_t i = 0; i < greeting_.size(); ++i) {
      if (fds[2 + i].revents != 0) {
        ReadHello(greeting_[i].fd);
      } else if (greeting_[i].deadline <= now) {
        Refuse(greeting_[i].fd, 1, fmt::format("no hello within {} ms", options_.hello_timeout.count()));
      } else {
        waiting.push_back(greeting_[i]);
      }
    }
    greeting_.swap(waiting);
    // A readable or hung-up control socket of an open session: the frontend closed it (the
    // protocol sends nothing after the hello) or sent garbage; either way the session ends, on
    // the reaper: its scrub (zeroing a range of gigabytes) must not hold up the next accept.
    for (size_t i = first_session; i < fds.size(); ++i) {
      if (fds[i].revents != 0) {
        PHOS_LOG(Info, "runtime", "control socket of a session closed; ending it");
        std::lock_guard lock(mu_);
        if (closed_.insert(tokens[i - first_session]).second) reaper_cv_.notify_all();
      }
    }
    if ((fds[0].revents & POLLIN) != 0) AcceptPending();
  }
  for (const Greeting& g : greeting_) close(g.fd);
  greeting_.clear();
}

// Until the earliest hello deadline, at most a second (token expiry).
int ApiServer::Impl::PollTimeoutMs() const {
  auto wait = std::chrono::milliseconds(1000);
  const auto now = std::chrono::steady_clock::now();
  for (const Greeting& g : greeting_) {
    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(g.deadline - now));
  }
  return static_cast<int>(std::max<int64_t>(wait.count(), 0));
}

// Every connection waiting in the backlog, each to greeting_ (or refused over the cap).
void ApiServer::Impl::AcceptPending() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    // Before anything is read: a process of another user may not even send a hello.
    Result<ucred> peer = PeerCredentials(fd);
    if (!peer.ok()) {
      Refuse(fd, 1, peer.status().message());
      continue;
    }
    if (!peers_.Allowed(*peer)) {
      Refuse(fd, 1, fmt::format("peer uid {} (pid {}) may not open GPU sessions", peer->uid, peer->pid));
      continue;
    }
    if (greeting_.size() >= options_.max_pending_hellos) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "GPU session refused: {} connections have not said hello yet",
                         greeting_.size());
      close(fd);
      continue;
    }
    greeting_.push_back({fd, std::chrono::steady_clock::now() + options_.hello_timeout});
  }
}

// Ends the sessions whose control socket closed, one after another, until the server stops (the
// destructor ends what is left).
void ApiServer::Impl::Reap() {
  std::unique_lock lock(mu_);
  while (true) {
    reaper_cv_.wait(lock, [this] { return stop_ || !closed_.empty(); });
    if (stop_) return;
    std::string token = *closed_.begin();
    lock.unlock();
    EndSession(token);
    lock.lock();
    closed_.erase(token);
  }
}

// Rate-limited: a peer that reconnects in a loop must not fill the log.
void ApiServer::Impl::Refuse(int fd, int32_t status, const std::string& why) {
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "GPU session refused: {}", why);
  ipc::Answer answer = ipc::MakeAnswer(status, why, 0);
  SendDatagram(fd, &answer, sizeof(answer)).IgnoreError();
  close(fd);
}

// A hello has arrived on `fd` (non-blocking): checked, then the session is opened on its own
// thread.
void ApiServer::Impl::ReadHello(int fd) {
  alignas(8) uint8_t buf[sizeof(ipc::Hello)];
  int passed = -1;
  Result<size_t> n = ipc::ReceiveDatagram(fd, buf, sizeof(buf), &passed);
  if (passed >= 0) close(passed);
  if (!n.ok()) return Refuse(fd, 1, fmt::format("bad hello: {}", n.status().message()));
  std::string token;
  if (Status s = ipc::CheckHello(buf, *n, &token); !s.ok()) return Refuse(fd, 1, s.message());
  ipc::Hello hello;
  std::memcpy(&hello, buf, sizeof(hello));
  Opening opening{.fd = fd, .token = token, .pid = hello.pid, .cancel = std::make_shared<std::atomic<bool>>(false)};
  {
    std::lock_guard lock(mu_);
    auto it = tokens_.find(token);
    if (it == tokens_.end()) return Refuse(fd, 1, "unknown instance token");
    if (sessions_.count(token) != 0 || opening_.count(token) != 0) {
      return Refuse(fd, 1, "instance token already has a GPU session");
    }
    opening.gpus = it->second.gpus;
    opening.restore = it->second.restore;
    opening.function = it->second.function;
    opening_[token] = opening.cancel;
    const uint64_t id = ++next_opener_;
    openers_[id] = std::thread([this, id, opening = std::move(opening)]() mutable {
      Open(std::move(opening));
      std::lock_guard done(mu_);
      finished_openers_.push_back(id);
    });
  }
}

void ApiServer::Impl::JoinFinishedOpeners() {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : finished_openers_) {
      auto it = openers_.find(id);
      if (it == openers_.end()) continue;
      done.push_back(std::move(it->second));
      openers_.erase(it);
    }
    finished_openers_.clear();
  }
  for (std::thread& t : done) t.join();
}

// The opener thread of one session: leases or creates its context (or adopts its restore),
// registers it and answers the frontend with its ring.
void ApiServer::Impl::Open(Opening o) {
  Status opened = OpenSession(o);
  {
    std::lock_guard lock(mu_);
    opening_.erase(o.token);
  }
  ended_cv_.notify_all();
  if (!opened.ok()) Refuse(o.fd, opened.code() == StatusCode::kNotFound ? 1 : 999, opened.message());
}

SessionRules ApiServer::Impl::Rules(const std::string& function) const {
  SessionRules rules{options_.session_limits, options_.trusted_modules, options_.collective_timeout,
                     options_.executor_idle_wait};
  std::lock_guard lock(mu_);
  auto it = quotas_.find(function);
  if (function.empty() || it == quotas_.end()) return rules;
  const SessionQuota& quota = it->second;
  // A function's limit (0: none of its own) lowers the server's, never raises it; the server's
  // device_bytes of 0 is no limit at all, its other limits of 0 allow nothing.
  auto lower = [](auto server, auto function_limit) {
    return function_limit == 0 ? server : std::min<decltype(server)>(server, function_limit);
  };
  rules.device_bytes = rules.device_bytes == 0 ? quota.device_bytes : lower(rules.device_bytes, quota.device_bytes);
  rules.buffers = lower(rules.buffers, quota.buffers);
  rules.handles = lower(rules.handles, quota.handles);
  rules.module_bytes = lower(rules.module_bytes, quota.module_bytes);
  return rules;
}

Status ApiServer::Impl::OpenSession(Opening& o) {
  if (o.gpus > 1 && groups_ == nullptr) {
    return Status::FailedPrecondition(
        fmt::format("a session of {} GPUs needs device groups, and this phosd has none (no NCCL)", o.gpus));
  }
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<ipc::Ring> ring, ipc::Ring::Create(options_.ring_bytes, options_.reply_bytes));
  int ring_fd = ring->fd();
  uint64_t ring_bytes = ring->mapped_bytes();
  Result<std::unique_ptr<Session>> session = Status::Internal("unset");
  if (o.restore != nullptr) {
    // The restore was started with the token (or starts now); the session's executor adopts it.
    o.restore->EnsureStarted();
    uint64_t va_bytes = o.restore->plan().va_slot >= 0 ? slot_bytes_ : options_.instance_va_bytes;
    session = Session::OpenRestored(driver_.get(), std::move(o.restore), &metadata_, va_bytes, std::move(ring),
                                    o.token, o.fd, o.pid, Rules(o.function));
  } else if (o.gpus > 1) {
    // The group is leased by the session's executor (it may have to wait for the refill).
    session = Session::OpenWithGroup(driver_.get(), groups_, o.gpus, std::move(ring), o.token, o.fd, o.pid, Rules(o.function));
  } else {
    Result<ctxpool::ContextLease> lease = pool_->Lease(o.cancel.get());
    if (!lease.ok()) return lease.status().WithContext("GPU session");
    session = Session::Open(driver_.get(), std::move(*lease), options_.device, options_.instance_va_bytes, std::move(ring),
                            o.token, o.fd, o.pid, Rules(o.function));
  }
  if (!session.ok()) return session.status();
  const int fd = o.fd;
  o.fd = -1;  // the session owns it now
  // Registered before the answer: once the frontend has its ring, EndSession(token) must find
  // the session. A token ended (or a server stopped) meanwhile gets no session.
  {
    std::lock_guard lock(mu_);
    if (o.cancel->load() || tokens_.count(o.token) == 0) {
      o.fd = dup(fd);  // refused below; the session closes its own copy
      session->reset();
      return Status::NotFound("the instance ended while its GPU session was opening");
    }
    sessions_[o.token] = std::move(*session);
  }
  ipc::Answer answer = ipc::MakeAnswer(0, "", ring_bytes);
  if (Status s = ipc::SendDatagram(fd, &answer, sizeof(answer), ring_fd); !s.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "answer to pid {} failed: {}", o.pid, s.message());
    std::lock_guard lock(mu_);
    if (closed_.insert(o.token).second) reaper_cv_.notify_all();  // the reaper ends it
  }
  return Status::Ok();
}

}  // namespace phos::runtime
