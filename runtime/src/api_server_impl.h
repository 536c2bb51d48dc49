// The API server's state and the threads that serve it: private to runtime/src/api_server*.cc.
// api_server.cc holds the tokens, sessions and the public API; api_server_accept.cc the acceptor,
// the openers and the reaper.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/ipc/control.h"
#include "phos/runtime/peer_policy.h"
#include "phos/runtime/api_server.h"
#include "restore_state.h"
#include "session.h"

namespace phos::runtime {

class ApiServer::Impl {
 public:

  Impl(const ApiServerOptions& options, std::shared_ptr<driver::DriverTable> driver, int listen_fd, int wake_fd)
      : options_(options), driver_(std::move(driver)), listen_fd_(listen_fd), peers_(geteuid()), wake_fd_(wake_fd) {
    for (const auto& [first, last] : options.allowed_peer_uids) peers_.AllowUids(first, last);
  }

  PeerPolicy& peers() { return peers_; }

  // The pools sessions lease from, one per device: the caller's, or private ones.
  Status OpenContextPools() {
    const int devices = std::max(device_count(), options_.device + 1);
    pools_.assign(static_cast<size_t>(devices), nullptr);
    for (int d = 0; d < devices; ++d) {
      if (static_cast<size_t>(d) < options_.context_pools.size() && options_.context_pools[d] != nullptr) {
        pools_[d] = options_.context_pools[d];
        continue;
      }
      PHOS_ASSIGN_OR_RETURN(auto own, ctxpool::ContextPool::Open({.device = d, .min_ready = 0, .max_contexts = 1024}, driver_));
      pools_[d] = own.get();
      own_pools_.push_back(std::move(own));
    }
    pool_ = pools_[options_.device];
    return Status::Ok();
  }

  // Device `device`'s pool (-1: the server's device); null for a device the node does not have.
  ctxpool::ContextPool* PoolOf(int device) const {
    if (device < 0) return pool_;
    return static_cast<size_t>(device) < pools_.size() ? pools_[device] : nullptr;
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

  std::string IssueToken(int gpus, std::chrono::milliseconds unclaimed_for = std::chrono::milliseconds::zero(),
                         std::string function = "") {
    std::string token = ipc::NewToken();
    std::lock_guard lock(mu_);
    if (unclaimed_for.count() > 0) ForgetOldestUnclaimedLocked(options_.max_unclaimed_tokens - 1);
    TokenInfo& info = tokens_[token];
    info.gpus = std::max(gpus, 1);
    info.function = std::move(function);
    if (unclaimed_for.count() > 0) info.expires = options_.clock() + unclaimed_for;
    return token;
  }

  // Tokens that may expire and have no session yet, oldest first forgotten until at most `keep`
  // are left: however fast they are asked for, they hold a bounded amount of memory. Requires mu_.
  void ForgetOldestUnclaimedLocked(size_t keep) {
    std::vector<std::map<std::string, TokenInfo>::iterator> unclaimed;
    for (auto it = tokens_.begin(); it != tokens_.end(); ++it) {
      const bool expiring = it->second.expires != std::chrono::steady_clock::time_point{};
      if (expiring && sessions_.count(it->first) == 0 && opening_.count(it->first) == 0 && ending_.count(it->first) == 0) {
        unclaimed.push_back(it);
      }
    }
    if (unclaimed.size() <= keep) return;
    std::sort(unclaimed.begin(), unclaimed.end(), [](const auto& a, const auto& b) { return a->second.expires < b->second.expires; });
    const size_t forget = unclaimed.size() - keep;
    for (size_t i = 0; i < forget; ++i) tokens_.erase(unclaimed[i]);
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "{} unclaimed session token(s) forgotten: at most {} wait to be used", forget,
                       options_.max_unclaimed_tokens);
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

  Result<int> ClaimVaSlot(int wanted) {
    std::lock_guard lock(mu_);
    if (wanted >= 0) {
      if (static_cast<size_t>(wanted) >= slots_taken_.size() || slots_taken_[wanted]) {
        return Status::Unavailable(fmt::format("instance range {} is taken or not one of the {}", wanted,
                                               slots_taken_.size()));
      }
      slots_taken_[wanted] = true;
      return wanted;
    }
    for (size_t i = 0; i < slots_taken_.size(); ++i) {
      if (!slots_taken_[i]) {
        slots_taken_[i] = true;
        return static_cast<int>(i);
      }
    }
    return Status::Unavailable(fmt::format("all {} instance ranges for snapshots are taken (ApiServerOptions::va_slots)",
                                           slots_taken_.size()));
  }

  void SetFunctionQuota(const std::string& function, SessionQuota quota) {
    std::lock_guard lock(mu_);
    if (quota.device_bytes == 0 && quota.buffers == 0 && quota.handles == 0 && quota.module_bytes == 0) {
      quotas_.erase(function);
    } else {
      quotas_[function] = quota;
    }
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
    std::string function = plan.function;
    const int device = plan.device >= 0 ? plan.device : options_.device;
    ctxpool::ContextPool* pool = PoolOf(device);
    auto restore = std::make_shared<RestoreState>(
        std::move(plan), driver_.get(), pool, groups_, &load_priority_,
        options_.share_read_only_buffers ? &shared_buffers_ : nullptr, device,
        slot_base != 0 ? slot_bytes_ : options_.instance_va_bytes, slot_base);
    std::lock_guard lock(mu_);
    tokens_[token] = {.gpus = gpus, .restore = std::move(restore), .function = std::move(function)};
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
                                  const std::string& device_profile, std::chrono::milliseconds timeout,
                                  const CaptureOptions& options) {
    // The session is looked up under the lock and used outside it: EndSession of this token must
    // not race a capture (the instance manager captures before it ends the session).
    Session* session = nullptr;
    bool none = false;
    {
      std::lock_guard lock(mu_);
      auto it = sessions_.find(token);
      none = it == sessions_.end();
      if (!none && capturing_.count(token) != 0) {
        // One at a time: EndSession waits for the one under way, which a second would hide.
        return Status::FailedPrecondition("a capture of this session is under way");
      }
      if (!none) {
        session = it->second.get();
        capturing_.insert(token);  // EndSession waits: the session must outlive the capture
      }
    }
    if (none) {
      // Nothing to copy. A soft capture still passes its point and (recopy) its final stop, where
      // the caller keeps the CPU side: those are the caller's, whatever the GPU holds.
      if (options.mode != CheckpointMode::kStopTheWorld && options.at_point) options.at_point();
      if (options.mode == CheckpointMode::kSoftRecopy && options.final_stop) {
        PHOS_RETURN_IF_ERROR(options.final_stop());
        if (options.resumed) options.resumed();
      }
      return Status::NotFound("the instance has no GPU session (it made no CUDA call)");
    }
    Result<uint64_t> version = session->Capture(store, function, device_profile, timeout, options);
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
  void EndSession(const std::string& token, RangeRelease how = RangeRelease::kZeroed) {
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
        moving_.erase(token);
        ended_cv_.wait(lock, [&] { return ending_.count(token) == 0; });
        return;
      }
      ended = std::move(it->second);
      sessions_.erase(it);
      ending_.insert(token);
      if (moving_.erase(token) != 0) how = RangeRelease::kUnmappedZeroedBehind;
      if (how == RangeRelease::kUnmappedZeroedBehind) ++ranges_zeroed_behind_;
    }
    ended->set_range_release(how);
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

  void MarkMoving(const std::string& token) {
    std::lock_guard lock(mu_);
    if (sessions_.count(token) != 0) moving_.insert(token);
  }

  uint64_t ranges_zeroed_behind() const {
    std::lock_guard lock(mu_);
    return ranges_zeroed_behind_;
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
  bool WaitForContexts(std::chrono::milliseconds timeout, const std::function<bool()>& stopping) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const size_t demand = demand_.load();
    auto met = [demand](const ctxpool::PoolStats& s) { return s.ready >= demand; };
    while (true) {
      if (stopping && stopping()) return met(pool_->Stats());
      // With a `stopping` to look at, in slices: the pool does not know of it.
      auto until = deadline;
      if (stopping) until = std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      if (pool_->WaitUntil([&](const ctxpool::PoolStats& s) { return met(s) || (s.creating == 0 && s.scrubbing == 0); },
                           std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())) &&
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
  void Loop();

  // Until the earliest hello deadline, at most a second (token expiry).
  int PollTimeoutMs() const;

  // Every connection waiting in the backlog, each to greeting_ (or refused over the cap).
  void AcceptPending();

  // Ends the sessions whose control socket closed, one after another, until the server stops (the
  // destructor ends what is left).
  void Reap();

  // Rate-limited: a peer that reconnects in a loop must not fill the log.
  void Refuse(int fd, int32_t status, const std::string& why);

  // A hello has arrived on `fd` (non-blocking): checked, then the session is opened on its own
  // thread.
  void ReadHello(int fd);

  void JoinFinishedOpeners();

  // A session being opened by its opener thread.
  struct Opening {
    int fd = -1;
    std::string token;
    int pid = 0;
    int gpus = 1;
    std::shared_ptr<RestoreState> restore;
    std::string function;
    std::shared_ptr<std::atomic<bool>> cancel;  // EndSession of the token, or the server stopping
  };

  // The opener thread of one session: leases or creates its context (or adopts its restore),
  // registers it and answers the frontend with its ring.
  void Open(Opening o);

  // The limits of a session of `function` ("": of no known function): the server's, narrowed by
  // the function's quota.
  SessionRules Rules(const std::string& function) const;

  Status OpenSession(Opening& o);


  ApiServerOptions options_;
  std::shared_ptr<driver::DriverTable> driver_;
  // Declared before the sessions: destroyed after them (leases may outlive a pool, but need not).
  std::vector<std::unique_ptr<ctxpool::ContextPool>> own_pools_;
  std::vector<ctxpool::ContextPool*> pools_;  // by device
  ctxpool::ContextPool* pool_ = nullptr;      // the server's device's
  // Declared before the sessions: destroyed after them (sessions return their groups to it).
  std::unique_ptr<ctxpool::CommunicatorPool> own_groups_;
  ctxpool::CommunicatorPool* groups_ = nullptr;
  int listen_fd_;
  PeerPolicy peers_;
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
    std::string function;                   // whose limits the session gets ("": the server's)
    std::chrono::steady_clock::time_point expires{};  // unclaimed by then: forgotten; {}: never
  };
  // Orders the restores' copies (urgent ones first); outlives every restore and session below.
  LoadPriority load_priority_;
  // Read-only buffers shared on the devices (docs/design.md D14); outlives every restore and session.
  SharedBuffers shared_buffers_;
  std::map<std::string, TokenInfo> tokens_;
  std::map<std::string, SessionQuota> quotas_;  // by function
  std::set<std::string> ending_;     // sessions being ended (EndSession waits for them)
  std::set<std::string> capturing_;  // sessions being captured (EndSession waits for them)
  std::set<std::string> closed_;     // control socket closed: the reaper ends them
  std::set<std::string> moving_;     // their instance moves: ended as kUnmappedZeroedBehind (MarkMoving)
  uint64_t ranges_zeroed_behind_ = 0;
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

}  // namespace phos::runtime
