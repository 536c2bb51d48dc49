// One thread per instance runs its whole life: spawn, wait for ready, take invocations from the
// function's queue, end. A supervisor thread tops functions up to their warm count, expires
// queued invocations and joins finished instance threads. One mutex guards all manager state;
// channel I/O and callbacks run outside it.
#include "phos/runtime/instance_manager.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "instance_process.h"
#include "phos/base/log.h"
#include "phos/runtime/instance_channel.h"

namespace phos::runtime {

using Clock = std::chrono::steady_clock;

namespace {

struct Invocation {
  std::string request;
  Clock::time_point deadline;
  std::function<void(InvokeOutcome)> done;
};

InvokeOutcome Outcome(InvokeOutcome::Kind kind, std::string message) {
  InvokeOutcome o;
  o.kind = kind;
  o.error = Status(kind == InvokeOutcome::Kind::kTimeout ? StatusCode::kTimeout : StatusCode::kUnavailable,
                   std::move(message));
  return o;
}

enum class InstanceState { kStarting, kIdle, kBusy };

struct Instance {
  uint64_t id = 0;
  InstanceState state = InstanceState::kStarting;
  std::thread thread;
};

struct Function {
  FunctionSpec spec;
  bool removed = false;
  std::deque<Invocation> queue;
  std::condition_variable cv;  // queue non-empty, removed, or stopping
  std::vector<std::shared_ptr<Instance>> instances;
  Clock::time_point next_start{};
  int start_failures = 0;
};

// Waits for `fd` readable or the stop eventfd, up to `deadline`. 1 readable, 0 timeout, -1 stop.
int WaitReadable(int fd, int stop_fd, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return 0;
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int rc = poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (fds[1].revents != 0) return -1;
    if (fds[0].revents != 0) return 1;
  }
}

}  // namespace

class InstanceManager::Impl {
 public:
  explicit Impl(InstanceManagerOptions options) : options_(std::move(options)) {}

  Status Open() {
    std::error_code ec;
    logs_dir_ = options_.data_dir + "/logs";
    std::filesystem::create_directories(logs_dir_, ec);
    if (ec) return Status::IoError("create " + logs_dir_ + ": " + ec.message());
    registry_path_ = options_.data_dir + "/functions.json";
    PHOS_ASSIGN_OR_RETURN(std::vector<FunctionSpec> specs, LoadFunctionRegistry(registry_path_));
    stop_fd_ = eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0) return Status::FromErrno(errno, "eventfd");
    for (FunctionSpec& spec : specs) {
      Status valid = ValidateFunctionSpec(spec);
      if (!valid.ok()) {
        // Kept registered (the executable may come back); its instances will fail to start.
        PHOS_LOG(Warn, "instances", "registered function: {}", valid.ToString());
      }
      auto f = std::make_shared<Function>();
      f->spec = std::move(spec);
      functions_[f->spec.name] = f;
    }
    PHOS_LOG(Info, "instances", "{} function(s) loaded from {}", functions_.size(), registry_path_);
    supervisor_ = std::thread([this] { Supervise(); });
    return Status::Ok();
  }

  ~Impl() {
    Shutdown();
    if (stop_fd_ >= 0) close(stop_fd_);
  }

  Status Register(const FunctionSpec& spec) {
    PHOS_RETURN_IF_ERROR(ValidateFunctionSpec(spec));
    std::lock_guard lock(mu_);
    if (stopping_) return Status::FailedPrecondition("phosd is shutting down");
    if (functions_.count(spec.name) != 0) {
      return Status::AlreadyExists("function '" + spec.name + "' is already registered");
    }
    auto f = std::make_shared<Function>();
    f->spec = spec;
    functions_[spec.name] = f;
    Status saved = SaveLocked();
    if (!saved.ok()) {
      functions_.erase(spec.name);
      return saved.WithContext("register function '" + spec.name + "'");
    }
    PHOS_LOG(Info, "instances", "registered '{}' ({}, {} instance(s))", spec.name, spec.executable, spec.instances);
    supervisor_cv_.notify_all();
    return Status::Ok();
  }

  Status Remove(const std::string& name) {
    std::deque<Invocation> orphans;
    {
      std::lock_guard lock(mu_);
      auto it = functions_.find(name);
      if (it == functions_.end()) return Status::NotFound("function '" + name + "' is not registered");
      std::shared_ptr<Function> f = it->second;
      functions_.erase(it);
      Status saved = SaveLocked();
      if (!saved.ok()) {
        functions_[name] = f;
        return saved.WithContext("remove function '" + name + "'");
      }
      f->removed = true;
      orphans.swap(f->queue);
      f->cv.notify_all();
    }
    for (Invocation& inv : orphans) {
      inv.done(Outcome(InvokeOutcome::Kind::kUnknownFunction, "function '" + name + "' was removed"));
    }
    PHOS_LOG(Info, "instances", "removed '{}'", name);
    return Status::Ok();
  }

  std::vector<FunctionStatus> List() const {
    std::lock_guard lock(mu_);
    std::vector<FunctionStatus> out;
    for (const auto& [name, f] : functions_) {
      FunctionStatus s;
      s.spec = f->spec;
      s.queued = f->queue.size();
      for (const auto& inst : f->instances) {
        if (inst->state == InstanceState::kStarting) ++s.starting;
        if (inst->state == InstanceState::kIdle) ++s.idle;
        if (inst->state == InstanceState::kBusy) ++s.busy;
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
              std::function<void(InvokeOutcome)> done) {
    if (timeout.count() <= 0) timeout = options_.invoke_timeout;
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      stopping = stopping_;
      auto it = functions_.find(name);
      if (!stopping && it != functions_.end()) {
        it->second->queue.push_back({std::move(request), Clock::now() + timeout, std::move(done)});
        it->second->cv.notify_one();
        supervisor_cv_.notify_all();  // it watches queued deadlines
        return;
      }
    }
    if (stopping) {
      done(Outcome(InvokeOutcome::Kind::kStopping, "phosd is shutting down"));
    } else {
      done(Outcome(InvokeOutcome::Kind::kUnknownFunction, "function '" + name + "' is not registered"));
    }
  }

  void Shutdown() {
    std::vector<Invocation> orphans;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (auto& [name, f] : functions_) {
        for (Invocation& inv : f->queue) orphans.push_back(std::move(inv));
        f->queue.clear();
        f->cv.notify_all();
      }
      supervisor_cv_.notify_all();
    }
    uint64_t one = 1;
    if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof(one)) < 0) {
      PHOS_LOG(Warn, "instances", "cannot signal stop: {}", std::strerror(errno));
    }
    for (Invocation& inv : orphans) inv.done(Outcome(InvokeOutcome::Kind::kStopping, "phosd is shutting down"));
    if (supervisor_.joinable()) supervisor_.join();
    // Removed functions' instances are only reachable through `finished_` and `live_`.
    std::vector<std::shared_ptr<Instance>> all;
    {
      std::lock_guard lock(mu_);
      all = live_;
    }
    for (auto& inst : all) {
      if (inst->thread.joinable()) inst->thread.join();
    }
    PHOS_LOG(Info, "instances", "all instances stopped");
  }

 private:
  // ---- supervisor ----

  void Supervise() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      Clock::time_point now = Clock::now();
      Clock::time_point wake = now + std::chrono::seconds(1);
      std::vector<Invocation> expired;
      for (auto& [name, f] : functions_) {
        for (auto it = f->queue.begin(); it != f->queue.end();) {
          if (it->deadline <= now) {
            expired.push_back(std::move(*it));
            it = f->queue.erase(it);
          } else {
            wake = std::min(wake, it->deadline);
            ++it;
          }
        }
        if (static_cast<int>(f->instances.size()) < f->spec.instances) {
          if (f->next_start <= now) {
            StartInstanceLocked(f);
            continue;  // re-examine: more may be needed
          }
          wake = std::min(wake, f->next_start);
        }
      }
      JoinFinishedLocked();
      if (!expired.empty()) {
        lock.unlock();
        for (Invocation& inv : expired) {
          inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "no instance became free before the deadline"));
        }
        lock.lock();
        continue;
      }
      if (NeedsStartLocked(now)) continue;
      supervisor_cv_.wait_until(lock, wake);
    }
    JoinFinishedLocked();
  }

  bool NeedsStartLocked(Clock::time_point now) const {
    for (const auto& [name, f] : functions_) {
      if (static_cast<int>(f->instances.size()) < f->spec.instances && f->next_start <= now) return true;
    }
    return false;
  }

  void StartInstanceLocked(const std::shared_ptr<Function>& f) {
    auto inst = std::make_shared<Instance>();
    inst->id = ++next_instance_id_;
    f->instances.push_back(inst);
    live_.push_back(inst);
    inst->thread = std::thread([this, f, inst] { RunInstance(f, inst); });
  }

  // Joins the threads of instances that have ended; called with mu_ held (they no longer take it).
  void JoinFinishedLocked() {
    for (auto& inst : finished_) {
      if (inst->thread.joinable()) inst->thread.join();
      live_.erase(std::remove(live_.begin(), live_.end(), inst), live_.end());
    }
    finished_.clear();
  }

  // ---- one instance's life ----

  void RunInstance(std::shared_ptr<Function> f, std::shared_ptr<Instance> inst) {
    const FunctionSpec spec = f->spec;  // copied once: the spec does not change after registration
    std::string token;
    std::vector<std::pair<std::string, std::string>> extra_env;
    if (options_.sessions != nullptr) {
      token = options_.sessions->IssueToken(spec.gpus);
      extra_env = {{"PHOS_GPU_SOCKET", options_.sessions->SocketPath()}, {"PHOS_INSTANCE_TOKEN", token}};
    }
    bool started = false;
    Result<InstanceProcess> spawned = SpawnInstanceProcess(spec, logs_dir_, extra_env);
    if (!spawned.ok()) {
      PHOS_LOG(Error, "instances", "function '{}': {}", spec.name, spawned.status().ToString());
    } else {
      InstanceProcess proc = std::move(spawned).value();
      started = Serve(f, inst, spec, proc);
      close(proc.channel_fd);
    }
    if (options_.sessions != nullptr) options_.sessions->EndSession(token);
    std::lock_guard lock(mu_);
    f->instances.erase(std::remove(f->instances.begin(), f->instances.end(), inst), f->instances.end());
    if (started) {
      f->start_failures = 0;
    } else {
      // Exponential backoff so that a function that cannot start does not spin.
      auto delay = options_.restart_backoff * (1 << std::min(f->start_failures, 6));
      f->next_start = Clock::now() + std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(30));
      ++f->start_failures;
    }
    finished_.push_back(inst);
    supervisor_cv_.notify_all();
  }

  // Returns whether the instance became ready. Ends the process before returning.
  bool Serve(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst, const FunctionSpec& spec,
             const InstanceProcess& proc) {
    const std::string who = "instance " + std::to_string(inst->id) + " of '" + spec.name + "' (pid " +
                            std::to_string(proc.pid) + ")";
    int ready = WaitReadable(proc.channel_fd, stop_fd_, Clock::now() + options_.start_timeout);
    if (ready <= 0) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      if (ready == 0) PHOS_LOG(Error, "instances", "{} not ready within {} ms; {}", who, options_.start_timeout.count(), how);
      return ready < 0;  // stopping is not a start failure
    }
    Result<invoke::Frame> hello = invoke::ReadFrame(proc.channel_fd);
    if (!hello.ok() || hello->kind != invoke::FrameKind::kReady) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(100));
      PHOS_LOG(Error, "instances", "{} failed before its ready frame ({}); {}; log: {}", who,
               hello.ok() ? "unexpected frame" : hello.status().ToString(), how, proc.log_path);
      return false;
    }
    PHOS_LOG(Info, "instances", "{} ready", who);
    {
      std::lock_guard lock(mu_);
      inst->state = InstanceState::kIdle;
    }
    while (true) {
      Invocation inv;
      {
        std::unique_lock lock(mu_);
        f->cv.wait(lock, [&] { return stopping_ || f->removed || !f->queue.empty(); });
        if (stopping_ || f->removed) break;
        inv = std::move(f->queue.front());
        f->queue.pop_front();
        inst->state = InstanceState::kBusy;
      }
      bool keep = Handle(proc, who, std::move(inv));
      std::lock_guard lock(mu_);
      inst->state = InstanceState::kIdle;
      if (!keep) return true;
    }
    // Orderly end: closing the channel makes the serve loop return 0.
    shutdown(proc.channel_fd, SHUT_RDWR);
    std::string how = EndInstanceProcess(proc.pid, options_.stop_grace);
    PHOS_LOG(Info, "instances", "{} stopped: {}", who, how);
    return true;
  }

  // Runs one invocation; returns false when the instance must be discarded (it has been ended).
  bool Handle(const InstanceProcess& proc, const std::string& who, Invocation inv) {
    if (inv.deadline <= Clock::now()) {
      inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "the deadline passed while the request was queued"));
      return true;
    }
    Status sent = invoke::WriteFrame(proc.channel_fd, invoke::FrameKind::kRequest, inv.request);
    int readable = sent.ok() ? WaitReadable(proc.channel_fd, stop_fd_, inv.deadline) : 1;
    if (readable == 0) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      PHOS_LOG(Warn, "instances", "{} timed out; discarded ({})", who, how);
      inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "the function did not answer before the deadline"));
      return false;
    }
    if (readable < 0) {
      EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      inv.done(Outcome(InvokeOutcome::Kind::kStopping, "phosd is shutting down"));
      return false;
    }
    Result<invoke::Frame> frame = sent.ok() ? invoke::ReadFrame(proc.channel_fd) : Result<invoke::Frame>(sent);
    if (!frame.ok() || (frame->kind != invoke::FrameKind::kResponse && frame->kind != invoke::FrameKind::kError)) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(200));
      std::string why = frame.ok() ? "sent an unexpected frame" : frame.status().message();
      PHOS_LOG(Warn, "instances", "{} lost during a request ({}); {}; log: {}", who, why, how, proc.log_path);
      inv.done(Outcome(InvokeOutcome::Kind::kInstanceLost, "the function instance failed: " + how));
      return false;
    }
    InvokeOutcome out;
    if (frame->kind == invoke::FrameKind::kResponse) {
      out.body = std::move(frame->payload);
    } else {
      out.kind = InvokeOutcome::Kind::kFunctionError;
      out.error = invoke::DecodeError(frame->payload);
    }
    inv.done(std::move(out));
    return true;
  }

  Status SaveLocked() {
    std::vector<FunctionSpec> specs;
    for (const auto& [name, f] : functions_) specs.push_back(f->spec);
    return SaveFunctionRegistry(registry_path_, specs);
  }

  InstanceManagerOptions options_;
  std::string logs_dir_;
  std::string registry_path_;
  int stop_fd_ = -1;  // eventfd, readable once stopping: wakes instances blocked on their channel

  mutable std::mutex mu_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Function>> functions_;
  std::vector<std::shared_ptr<Instance>> live_;      // every instance whose thread is not joined
  std::vector<std::shared_ptr<Instance>> finished_;  // ended, thread to be joined
  uint64_t next_instance_id_ = 0;
  std::condition_variable supervisor_cv_;
  std::thread supervisor_;
};

InstanceManager::InstanceManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InstanceManager::~InstanceManager() { impl_->Shutdown(); }

Result<std::unique_ptr<InstanceManager>> InstanceManager::Open(const InstanceManagerOptions& options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("instance manager: data_dir is required");
  auto impl = std::make_unique<Impl>(options);
  PHOS_RETURN_IF_ERROR(impl->Open().WithContext("instance manager"));
  return std::unique_ptr<InstanceManager>(new InstanceManager(std::move(impl)));
}

Status InstanceManager::Register(const FunctionSpec& spec) { return impl_->Register(spec); }
Status InstanceManager::Remove(const std::string& name) { return impl_->Remove(name); }
std::vector<FunctionStatus> InstanceManager::List() const { return impl_->List(); }
void InstanceManager::Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
                             std::function<void(InvokeOutcome)> done) {
  impl_->Invoke(name, std::move(request), timeout, std::move(done));
}
void InstanceManager::Shutdown() { impl_->Shutdown(); }

}  // namespace phos::runtime
