#include "phos/runtime/api_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ipc/control.h"
#include "restore_state.h"
#include "session.h"

namespace phos::runtime {

class ApiServer::Impl {
 public:

  Impl(const ApiServerOptions& options, driver::DriverTable* driver, int listen_fd, int wake_fd)
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
    std::map<uint64_t, std::thread> openers;
    {
      std::lock_guard lock(mu_);
      for (auto& [token, cancel] : opening_) cancel->store(true);
      openers.swap(openers_);
      reaper_cv_.notify_all();
    }
    for (auto& [id, t] : openers) t.join();
    if (reaper_.joinable()) reaper_.join();
    std::map<std::string, std::unique_ptr<Session>> sessions;
    {
      std::lock_guard lock(mu_);
      sessions.swap(sessions_);
    }
    sessions.clear();
    tokens_.clear();  // restores never adopted give their memory back before the arena goes
    close(listen_fd_);
    close(wake_fd_);
    if (arena_ != 0) driver_->cuMemAddressFree(arena_, slot_bytes_ * slots_taken_.size());
    unlink(options_.socket_path.c_str());
  }

  void StartAcceptor() {
    acceptor_ = std::thread([this] { Loop(); });
    reaper_ = std::thread([this] { Reap(); });
  }

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

  std::string IssueToken(int gpus, std::chrono::milliseconds unclaimed_for = std::chrono::milliseconds::zero()) {
    std::string token = ipc::NewToken();
    std::lock_guard lock(mu_);
    TokenInfo& info = tokens_[token];
    info.gpus = std::max(gpus, 1);
    if (unclaimed_for.count() > 0) info.expires = options_.clock() + unclaimed_for;
    return token;
  }

  // Forgets tokens whose time to be claimed passed with no session (the acceptor, each second).
  void ExpireUnclaimedTokens() {
    auto now = options_.clock();
    std::lock_guard lock(mu_);
    for (auto it = tokens_.begin(); it != tokens_.end();) {
      bool unclaimed = it->second.expires != std::chrono::steady_clock::time_point{} && it->second.expires <= now &&
                       sessions_.count(it->first) == 0 && ending_.count(it->first) == 0;
      if (unclaimed) {
        PHOS_LOG(Info, "runtime", "a session token was not used in time; forgotten");
        it = tokens_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The arena of instance ranges for snapshots (ApiServerOptions::va_slots).
  Status ReserveArena() {
    if (options_.va_slots <= 0 || options_.instance_va_bytes == 0) return Status::Ok();
    PHOS_ASSIGN_OR_RETURN(const uint64_t granularity,
                          DeviceMemoryGranularity(*driver_, options_.device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    slot_bytes_ = (options_.instance_va_bytes + granularity - 1) / granularity * granularity;
    uint64_t bytes = slot_bytes_ * static_cast<uint64_t>(options_.va_slots);
    PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuMemAddressReserve(&arena_, bytes, granularity, 0, 0));
    slots_taken_.assign(options_.va_slots, false);
    PHOS_LOG(Info, "runtime", "{} instance ranges of {} GiB for snapshots at [{:#x}, +{})", options_.va_slots,
             slot_bytes_ >> 30, arena_, bytes);
    return Status::Ok();
  }

  Result<int> ClaimVaSlot() {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < slots_taken_.size(); ++i) {
      if (!slots_taken_[i]) {
        slots_taken_[i] = true;
        return static_cast<int>(i);
      }
    }
    return Status::Unavailable(fmt::format("all {} instance ranges for snapshots are taken (ApiServerOptions::va_slots)",
                                           slots_taken_.size()));
  }

  void ReleaseVaSlot(int slot) {
    std::lock_guard lock(mu_);
    if (slot >= 0 && static_cast<size_t>(slot) < slots_taken_.size()) slots_taken_[slot] = false;
  }

  std::string IssueToken(SessionPlan plan) {
    std::string token = ipc::NewToken();
    CUdeviceptr slot_base = 0;
    if (plan.va_slot >= 0 && static_cast<size_t>(plan.va_slot) < slots_taken_.size()) {
      slot_base = arena_ + slot_bytes_ * static_cast<uint64_t>(plan.va_slot);
    }
    int gpus = std::max(plan.gpus, 1);
    auto restore = std::make_shared<RestoreState>(
        std::move(plan), driver_, pool_, groups_, &load_priority_,
        options_.share_read_only_buffers ? &shared_buffers_ : nullptr, options_.device,
        slot_base != 0 ? slot_bytes_ : options_.instance_va_bytes, slot_base);
    std::lock_guard lock(mu_);
    tokens_[token] = {gpus, std::move(restore)};
    return token;
  }

  std::shared_ptr<RestoreState> RestoreOf(const std::string& token, Status* status) const {
    std::lock_guard lock(mu_);
    auto it = tokens_.find(token);
    if (it == tokens_.end()) {
      *status = Status::NotFound("unknown instance token");
      return nullptr;
    }
    return it->second.restore;
  }

  Status WaitPrepared(const std::string& token, std::chrono::milliseconds timeout) {
    Status s;
    std::shared_ptr<RestoreState> restore = RestoreOf(token, &s);
    if (!s.ok() || restore == nullptr) return s;
    return restore->Wait(timeout);
  }

  Result<SessionTimeline> Timeline(const std::string& token) const {
    std::lock_guard lock(mu_);
    auto it = tokens_.find(token);
    if (it == tokens_.end()) return Status::NotFound("unknown instance token");
    if (auto s = sessions_.find(token); s != sessions_.end()) return s->second->Timeline();
    SessionTimeline t;
    if (it->second.restore != nullptr) {
      RestoreState::Times times = it->second.restore->times();
      t.restored = it->second.restore->plan().manifest != nullptr;
      t.issued = times.issued;
      t.leased = times.leased;
      t.pool_wait = times.pool_wait;
      t.prepared = times.prepared;
    }
    return t;
  }

  LearnedUsage TakeLearnedUsage(const std::string& token) {
    Status s;
    std::shared_ptr<RestoreState> restore = RestoreOf(token, &s);
    return restore == nullptr ? LearnedUsage{} : restore->TakeLearnedUsage();
  }

  Result<uint64_t> CaptureSession(const std::string& token, store::Store& store, const std::string& function,
                                  const std::string& device_profile, std::chrono::milliseconds timeout) {
    // The session is looked up under the lock and used outside it: EndSession of this token must
    // not race a capture (the instance manager captures before it ends the session).
    Session* session = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = sessions_.find(token);
      if (it == sessions_.end()) return Status::NotFound("the instance has no GPU session (it made no CUDA call)");
      session = it->second.get();
      capturing_.insert(token);  // EndSession waits: the session must outlive the capture
    }
    Result<uint64_t> version = session->Capture(store, function, device_profile, timeout);
    {
      std::lock_guard lock(mu_);
      capturing_.erase(token);
    }
    ended_cv_.notify_all();
    return version;
  }

  // Returns once the token's session is gone, whichever thread ends it (the reaper ends a
  // session whose control socket closed): the caller may hand the session's instance range to
  // the next instance right after.
  void EndSession(const std::string& token) {
    std::unique_ptr<Session> ended;
    TokenInfo info;  // its restore, if never adopted, is released outside the lock too
    {
      std::unique_lock lock(mu_);
      if (auto t = tokens_.find(token); t != tokens_.end()) {
        info = std::move(t->second);
        tokens_.erase(t);
      }
      // A session still opening is cancelled and waited for: it must not come up after this.
      if (auto o = opening_.find(token); o != opening_.end()) o->second->store(true);
      ended_cv_.wait(lock, [&] { return capturing_.count(token) == 0 && opening_.count(token) == 0; });
      auto it = sessions_.find(token);
      if (it == sessions_.end()) {
        ended_cv_.wait(lock, [&] { return ending_.count(token) == 0; });
        return;
      }
      ended = std::move(it->second);
      sessions_.erase(it);
      ending_.insert(token);
    }
    ended.reset();  // joins the executor and frees the session's GPU state, outside the lock
    info = {};
    {
      std::lock_guard lock(mu_);
      ending_.erase(token);
    }
    ended_cv_.notify_all();
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  size_t session_count() const {
    std::lock_guard lock(mu_);
    return sessions_.size();
  }

  void SetContextDemand(size_t contexts) {
    demand_.store(contexts);
    pool_->SetDemand(contexts);
  }

  // Until the pool has the demand ready, or nothing is on its way (a creation or a scrub) and the
  // refill has nothing left it can do (at its maximum, or after a failed creation).
  bool WaitForContexts(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const size_t demand = demand_.load();
    auto met = [demand](const ctxpool::PoolStats& s) { return s.ready >= demand; };
    while (true) {
      if (pool_->WaitUntil([&](const ctxpool::PoolStats& s) { return met(s) || (s.creating == 0 && s.scrubbing == 0); },
                           std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())) &&
          met(pool_->Stats())) {
        return true;
      }
      // Nothing on its way, or the time is up: done unless the refill is about to start one.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || pool_->WaitIdle(std::chrono::milliseconds(0))) return met(pool_->Stats());
    }
  }

  const ApiServerOptions& options() const { return options_; }
  int device_count() const {
    int count = 0;
    return driver_->cuDeviceGetCount(&count) == CUDA_SUCCESS ? count : 0;
  }

 private:
  // The acceptor only accepts, reads hellos that have arrived and notices closed control sockets:
  // nothing it does waits. A hello that does not come within options_.hello_timeout, or a
  // connection beyond options_.max_pending_hellos, is refused; what opening a session waits for
  // (a pooled context, a created one, a restore) happens on that session's opener thread.
  void Loop() {
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
  int PollTimeoutMs() const {
    auto wait = std::chrono::milliseconds(1000);
    const auto now = std::chrono::steady_clock::now();
    for (const Greeting& g : greeting_) {
      wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(g.deadline - now));
    }
    return static_cast<int>(std::max<int64_t>(wait.count(), 0));
  }

  // Every connection waiting in the backlog, each to greeting_ (or refused over the cap).
  void AcceptPending() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
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
  void Reap() {
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
  void Refuse(int fd, int32_t status, const std::string& why) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "GPU session refused: {}", why);
    ipc::Answer answer = ipc::MakeAnswer(status, why, 0);
    SendDatagram(fd, &answer, sizeof(answer)).IgnoreError();
    close(fd);
  }

  // A hello has arrived on `fd` (non-blocking): checked, then the session is opened on its own
  // thread.
  void ReadHello(int fd) {
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
      opening_[token] = opening.cancel;
      const uint64_t id = ++next_opener_;
      openers_[id] = std::thread([this, id, opening = std::move(opening)]() mutable {
        Open(std::move(opening));
        std::lock_guard done(mu_);
        finished_openers_.push_back(id);
      });
    }
  }

  void JoinFinishedOpeners() {
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

  // A session being opened by its opener thread.
  struct Opening {
    int fd = -1;
    std::string token;
    int pid = 0;
    int gpus = 1;
    std::shared_ptr<RestoreState> restore;
    std::shared_ptr<std::atomic<bool>> cancel;  // EndSession of the token, or the server stopping
  };

  // The opener thread of one session: leases or creates its context (or adopts its restore),
  // registers it and answers the frontend with its ring.
  void Open(Opening o) {
    Status opened = OpenSession(o);
    {
      std::lock_guard lock(mu_);
      opening_.erase(o.token);
    }
    ended_cv_.notify_all();
    if (!opened.ok()) Refuse(o.fd, opened.code() == StatusCode::kNotFound ? 1 : 999, opened.message());
  }

  SessionLimits Limits() const {
    return {.trusted_modules = options_.trusted_modules,
            .module_bytes = options_.session_module_bytes,
            .modules = options_.session_modules,
            .device_bytes = options_.session_device_bytes,
            .handles = options_.session_handles};
  }

  Status OpenSession(Opening& o) {
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
      session = Session::OpenRestored(driver_, std::move(o.restore), &metadata_, options_.device, va_bytes, std::move(ring),
                                      o.token, o.fd, o.pid, Limits());
    } else if (o.gpus > 1) {
      // The group is leased by the session's executor (it may have to wait for the refill).
      session = Session::OpenWithGroup(driver_, groups_, o.gpus, std::move(ring), o.token, o.fd, o.pid, Limits());
    } else {
      Result<ctxpool::ContextLease> lease = pool_->Lease(o.cancel.get());
      if (!lease.ok()) return lease.status().WithContext("GPU session");
      session = Session::Open(driver_, std::move(*lease), options_.device, options_.instance_va_bytes, std::move(ring),
                              o.token, o.fd, o.pid, Limits());
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

  ApiServerOptions options_;
  driver::DriverTable* driver_;
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
  // Connections that have not said hello yet, with when they must have (acceptor thread only).
  struct Greeting {
    int fd;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Greeting> greeting_;
  mutable std::mutex mu_;
  // Sessions being opened, by token: their opener's cancel flag (EndSession sets it).
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> opening_;
  std::map<uint64_t, std::thread> openers_;  // by opener id; joined by the acceptor once finished
  std::vector<uint64_t> finished_openers_;
  uint64_t next_opener_ = 0;
  struct TokenInfo {
    int gpus = 1;
    std::shared_ptr<RestoreState> restore;  // set for tokens issued with a SessionPlan
    std::chrono::steady_clock::time_point expires{};  // unclaimed by then: forgotten; {}: never
  };
  // Orders the restores' copies (urgent ones first); outlives every restore and session below.
  LoadPriority load_priority_;
  // Read-only buffers shared on the devices (docs/design.md D14); outlives every restore and session.
  SharedBuffers shared_buffers_;
  std::map<std::string, TokenInfo> tokens_;
  std::set<std::string> ending_;     // sessions being ended (EndSession waits for them)
  std::set<std::string> capturing_;  // sessions being captured (EndSession waits for them)
  std::set<std::string> closed_;     // control socket closed: the reaper ends them
  std::condition_variable reaper_cv_;
  std::thread reaper_;
  std::condition_variable ended_cv_;
  std::atomic<size_t> demand_{0};    // SetContextDemand's last
  CUdeviceptr arena_ = 0;            // the instance ranges for snapshots, slot_bytes_ each
  uint64_t slot_bytes_ = 0;
  std::vector<bool> slots_taken_;
  // Kernel parameter kinds by module content hash, shared by every restored session.
  ParamMetadataCache metadata_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;
};

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServer::~ApiServer() = default;

Result<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options, driver::DriverTable* driver) {
  if (driver == nullptr) return Status::InvalidArgument("ApiServer needs a driver table");
  if (!options.clock) return Status::InvalidArgument("ApiServer needs a clock (ApiServerOptions::clock)");
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  PHOS_ASSIGN_OR_RETURN(int listen_fd, ipc::ListenSeqpacket(options.socket_path));
  // The acceptor takes every connection waiting and stops at EAGAIN: it never blocks in accept.
  if (fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK) != 0) {
    Status s = Status::FromErrno(errno, "fcntl(O_NONBLOCK) on " + options.socket_path);
    close(listen_fd);
    return s;
  }
  int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return Status::FromErrno(errno, "eventfd");
  }
  auto impl = std::make_unique<Impl>(options, driver, listen_fd, wake_fd);
  if (Status s = impl->OpenContextPool(); !s.ok()) return s.WithContext("API server");
  if (Status s = impl->ReserveArena(); !s.ok()) return s.WithContext("API server: instance ranges for snapshots");
  impl->OpenDeviceGroups();
  impl->StartAcceptor();
  PHOS_LOG(Info, "runtime", "API server listening on {}", options.socket_path);
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

std::string ApiServer::IssueToken(int gpus) { return impl_->IssueToken(gpus); }
std::string ApiServer::IssueToken(SessionPlan plan) { return impl_->IssueToken(std::move(plan)); }
std::string ApiServer::IssueToken(int gpus, std::chrono::milliseconds unclaimed_for) {
  return impl_->IssueToken(gpus, unclaimed_for);
}
void ApiServer::ExpireUnclaimedTokens() { impl_->ExpireUnclaimedTokens(); }
Status ApiServer::WaitPrepared(const std::string& token, std::chrono::milliseconds timeout) {
  return impl_->WaitPrepared(token, timeout);
}
Result<SessionTimeline> ApiServer::Timeline(const std::string& token) const { return impl_->Timeline(token); }
LearnedUsage ApiServer::TakeLearnedUsage(const std::string& token) { return impl_->TakeLearnedUsage(token); }
Result<uint64_t> ApiServer::CaptureSession(const std::string& token, store::Store& store, const std::string& function,
                                           const std::string& device_profile, std::chrono::milliseconds timeout) {
  return impl_->CaptureSession(token, store, function, device_profile, timeout);
}
void ApiServer::EndSession(const std::string& token) { impl_->EndSession(token); }
Result<int> ApiServer::ClaimVaSlot() { return impl_->ClaimVaSlot(); }
void ApiServer::ReleaseVaSlot(int slot) { impl_->ReleaseVaSlot(slot); }
size_t ApiServer::session_count() const { return impl_->session_count(); }
void ApiServer::SetContextDemand(size_t contexts) { impl_->SetContextDemand(contexts); }
bool ApiServer::WaitForContexts(std::chrono::milliseconds timeout) { return impl_->WaitForContexts(timeout); }
const std::string& ApiServer::socket_path() const { return impl_->options().socket_path; }
int ApiServer::device_count() const { return impl_->device_count(); }

}  // namespace phos::runtime
