// The registry, invocation routing, the supervisor and each instance's life (see
// instance_manager_impl.h); deploy and restore are in instance_deploy.cc.
#include "phos/runtime/instance_manager.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "instance_manager_impl.h"
#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/ipc/instance_channel.h"

namespace phos::runtime {

ipc::invoke::EnvList InstanceManager::Impl::ProcessEnv(const FunctionSpec& spec, ipc::invoke::EnvList session) const {
  if (options_.function_library_dir.empty()) return session;
  std::string rest;
  if (const char* own = std::getenv("LD_LIBRARY_PATH"); own != nullptr) rest = own;
  for (const auto& [name, value] : spec.env) {
    if (name == "LD_LIBRARY_PATH") rest = value;
  }
  session.emplace_back("LD_LIBRARY_PATH", rest.empty() ? options_.function_library_dir
                                                       : options_.function_library_dir + ":" + rest);
  return session;
}

const char* InstanceEventName(InstanceEvent::Kind kind) {
  switch (kind) {
    case InstanceEvent::Kind::kStarted: return "started";
    case InstanceEvent::Kind::kRestored: return "restored";
    case InstanceEvent::Kind::kEvicted: return "evicted";
    case InstanceEvent::Kind::kEnded: return "ended";
  }
  return "unknown";
}

void InstanceManager::Impl::Emit(InstanceEvent::Kind kind, const Function& f, const Instance& inst) const {
  if (!options_.on_event) return;
  options_.on_event(
      InstanceEvent{.kind = kind, .function = f.name, .version = f.number, .instance = inst.id, .mode = inst.mode});
}

InvokeOutcome Outcome(InvokeOutcome::Kind kind, std::string message) {
  InvokeOutcome o;
  o.kind = kind;
  o.error = Status(kind == InvokeOutcome::Kind::kTimeout ? StatusCode::kTimeout : StatusCode::kUnavailable,
                   std::move(message));
  return o;
}

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

// ---- GpuSessions: no snapshots unless implemented ----

Result<uint64_t> GpuSessions::Capture(const std::string&, const std::string&, const CaptureOptions&) {
  return Status::NotSupported("these GPU sessions keep no snapshots");
}
uint64_t GpuSessions::SnapshotBytes(const std::string&, uint64_t) { return 0; }
Result<int> GpuSessions::ClaimVaSlot() { return Status::NotSupported("these GPU sessions keep no snapshots"); }
Result<int> GpuSessions::ClaimVaSlotAt(int) { return Status::NotSupported("these GPU sessions keep no snapshots"); }
Status GpuSessions::SameLayout(const std::string&, uint64_t, uint64_t) {
  return Status::NotSupported("these GPU sessions keep no snapshots");
}
void GpuSessions::ReleaseVaSlot(int) {}
void GpuSessions::Stage(const std::string&, uint64_t) {}
Result<std::string> GpuSessions::IssueRestoreToken(const RestoreRequest&) {
  return Status::NotSupported("these GPU sessions keep no snapshots");
}
Status GpuSessions::WaitPrepared(const std::string&, std::chrono::milliseconds) { return Status::Ok(); }
SessionTimeline GpuSessions::Timeline(const std::string&) { return {}; }
bool GpuSessions::HasFirstTouch(const std::string&, uint64_t) { return true; }
bool GpuSessions::SaveFirstTouch(const std::string&, const std::string&, const std::vector<uint64_t>&) { return false; }
void GpuSessions::RetainOnly(const std::string&, const std::vector<uint64_t>&) {}
void GpuSessions::SetContextDemand(size_t) {}
bool GpuSessions::WaitForContexts(std::chrono::milliseconds, const std::function<bool()>&) { return true; }

// ---- the manager ----

InstanceManager::Impl::~Impl() {
  Shutdown();
  if (stop_fd_ >= 0) close(stop_fd_);
}

void InstanceManager::Impl::ForgetLocked(const std::string& key) {
  auto it = functions_.find(key);
  if (it == functions_.end()) return;
  if (auto v = versions_.find(it->second->name); v != versions_.end()) {
    if (v->second.serving == key) versions_.erase(v);
    else if (v->second.deploying == key) v->second.deploying.clear();
  }
  functions_.erase(it);
  if (options_.sessions != nullptr) options_.sessions->SetFunctionLimits(key, {});
}

Status InstanceManager::Impl::Open() {
  std::error_code ec;
  logs_dir_ = options_.data_dir + "/logs";
  std::filesystem::create_directories(logs_dir_, ec);
  if (ec) return Status::IoError("create " + logs_dir_ + ": " + ec.message());
  registry_path_ = options_.data_dir + "/functions.json";
  PHOS_ASSIGN_OR_RETURN(FunctionRegistry registry, LoadFunctionRegistry(registry_path_));
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  std::lock_guard lock(mu_);
  for (const auto& [name, at] : registry.registered_at_ms) last_stamp_ms_ = std::max(last_stamp_ms_, at);
  for (const auto* versions : {&registry.serving, &registry.kept}) {
    for (const FunctionVersion& v : *versions) last_stamp_ms_ = std::max(last_stamp_ms_, v.deployed_at_ms);
  }
  bool unregistered = false;  // a name of a registry written before registrations were kept
  for (FunctionVersion& version : registry.serving) {
    const std::string name = version.spec.name;
    Status valid = Validate(version.spec);
    // The serving version under the key of its number: no other key of it is in use yet.
    const std::string key = VersionKey(name, version.number);
    FunctionSpec confined = version.spec;
    confined.name = key;
    if (valid.ok() && options_.sandbox != nullptr) valid = options_.sandbox->PrepareFunction(confined);
    if (!valid.ok()) {
      // Kept registered (the executable may come back); its instances will fail to start.
      PHOS_LOG(Warn, "instances", "registered function: {}", valid.ToString());
    }
    if (versions_.count(name) != 0) return Status::Corruption(registry_path_ + ": '" + name + "' is listed twice");
    auto registered = registry.registered_at_ms.find(name);
    const bool known = registered != registry.registered_at_ms.end();
    unregistered = unregistered || !known;
    versions_[name] = VersionTable{.serving = key,
                                   .last = version.number,
                                   .serial = version.number,
                                   .registered_at_ms = known ? registered->second : NewStampLocked()};
    std::shared_ptr<Function> f = AddVersionLocked(std::move(version), key);
    // A job's checkpoints, and its instance range claimed before any deploy takes it.
    if (SnapshotsEnabled() && f->spec.job.checkpoint_every > 0) LoadJobLocked(*f);
  }
  for (FunctionVersion& version : registry.kept) {
    auto v = versions_.find(version.spec.name);
    if (v == versions_.end()) continue;  // of no function registered: nothing to roll back
    v->second.last = std::max(v->second.last, version.number);
    v->second.serial = std::max(v->second.serial, version.number);
    v->second.kept.push_back(std::move(version));
  }
  for (auto& [name, v] : versions_) {
    std::sort(v.kept.begin(), v.kept.end(), [](const FunctionVersion& a, const FunctionVersion& b) {
      return a.number < b.number;
    });
  }
  if (unregistered) {
    // Given now to what an older registry lists, and kept at once: the next restart reads the same.
    if (Status saved = SaveLocked(); !saved.ok()) {
      PHOS_LOG(Warn, "instances", "the registrations given to {} are not kept: {}", registry_path_,
               saved.message());
    }
  }
  for (const auto& [name, f] : functions_) {
    // Snapshots and templates do not outlive phosd's processes: deployed again.
    if (SnapshotsEnabled()) StartDeployLocked(f, "");
    StartJobLocked(f, /*fresh=*/false);
  }
  PHOS_LOG(Info, "instances", "{} function(s) loaded from {}", functions_.size(), registry_path_);
  supervisor_ = std::thread([this] { Supervise(); });
  return Status::Ok();
}

Status InstanceManager::Impl::Validate(const FunctionSpec& spec) const {
  PHOS_RETURN_IF_ERROR(ValidateFunctionSpec(spec));
  if (options_.sessions == nullptr) return Status::Ok();  // instances get no GPU at all
  const int devices = options_.sessions->DeviceCount();
  if (spec.gpus > devices) {
    return Status::InvalidArgument(fmt::format("function '{}' asks for {} GPUs; this node has {}", spec.name,
                                               spec.gpus, devices));
  }
  return Status::Ok();
}

Status InstanceManager::Impl::Register(const FunctionSpec& spec) {
  PHOS_RETURN_IF_ERROR(Validate(spec));
  // Its version's digest, before the lock; with snapshots its deploy takes it (RunDeploy).
  const std::string digest = SnapshotsEnabled() ? "" : FileSha256Hex(spec.executable);
  std::lock_guard lock(mu_);
  if (stopping_) return Status::FailedPrecondition("phosd is shutting down");
  if (versions_.count(spec.name) != 0) {
    return Status::AlreadyExists("function '" + spec.name + "' is already registered");
  }
  // Its cgroup (with the spec's limits) before any process of it runs.
  if (options_.sandbox != nullptr) PHOS_RETURN_IF_ERROR(options_.sandbox->PrepareFunction(spec));
  std::shared_ptr<Function> f = AddFunctionLocked(spec);
  f->executable_sha256 = digest;
  Status saved = SaveLocked();
  if (!saved.ok()) {
    ForgetLocked(spec.name);
    if (options_.sandbox != nullptr) options_.sandbox->RemoveFunction(spec.name);
    return saved.WithContext("register function '" + spec.name + "'");
  }
  PHOS_LOG(Info, "instances", "registered '{}' ({}, {} instance(s))", spec.name, spec.executable, spec.instances);
  if (SnapshotsEnabled()) StartDeployLocked(f, "");
  StartJobLocked(f, /*fresh=*/true);
  supervisor_cv_.notify_all();
  return Status::Ok();
}

Status InstanceManager::Impl::Remove(const std::string& name, const HeldFunction* held) {
  std::vector<TakeDown> downs;  // its serving version's and a deploying one's
  {
    std::lock_guard lock(mu_);
    auto v = versions_.find(name);
    if (v == versions_.end()) return Status::NotFound("function '" + name + "' is not registered");
    const VersionTable table = v->second;
    if (held != nullptr) PHOS_RETURN_IF_ERROR(HeldLocked(name, table, *held));
    std::vector<std::shared_ptr<Function>> gone;
    for (const std::string& key : {table.serving, table.deploying}) {
      if (auto it = functions_.find(key); it != functions_.end()) {
        gone.push_back(it->second);
        functions_.erase(it);
      }
    }
    versions_.erase(v);
    Status saved = SaveLocked();
    if (!saved.ok()) {
      versions_[name] = table;
      for (const auto& f : gone) functions_[f->spec.name] = f;
      return saved.WithContext("remove function '" + name + "'");
    }
    for (const auto& f : gone) downs.push_back(TakeDownLocked(f));
  }
  for (TakeDown& down : downs) FinishTakeDown(down, "function '" + name + "' was removed", /*drop=*/true);
  PHOS_LOG(Info, "instances", "removed '{}'", name);
  return Status::Ok();
}

TakeDown InstanceManager::Impl::TakeDownLocked(const std::shared_ptr<Function>& f) {
  TakeDown down{.f = f};
  f->removed = true;
  down.moved_to = std::move(f->moved_to);
  if (options_.sessions != nullptr) options_.sessions->SetFunctionLimits(f->spec.name, {});
  down.orphans.swap(f->queue);
  for (auto it = f->slots.begin(); it != f->slots.end();) {
    if (it->holder == 0) {
      down.free_slots.push_back(*it);
      it = f->slots.erase(it);
    } else {
      ++it;
    }
  }
  f->cv.notify_all();
  f->slot_cv.notify_all();
  down.deploys.swap(f->deployed_callbacks);
  PublishDemandLocked();
  return down;
}

void InstanceManager::Impl::FinishTakeDown(TakeDown& down, const std::string& why, bool drop) {
  for (auto& cb : down.deploys) cb(DeployFailed(Status::NotFound(why + " while it deployed")));
  for (Invocation& inv : down.orphans) inv.done(Outcome(InvokeOutcome::Kind::kUnknownFunction, why));
  ReleaseSlots(down.free_slots);
  down.moved_to.reset();
  // Whatever of it still runs (a template, instances ending) is killed with its cgroup.
  if (drop) DropVersionResources(down.f->spec.name);
}

void InstanceManager::Impl::DropVersionResources(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    if (functions_.count(key) != 0) return;  // the key serves again (a function removed and deployed anew)
  }
  if (SnapshotsEnabled()) options_.sessions->RetainOnly(key, {});
  if (options_.sandbox != nullptr) options_.sandbox->RemoveFunction(key);
}

std::vector<FunctionStatus> InstanceManager::Impl::List() const {
  std::lock_guard lock(mu_);
  std::vector<FunctionStatus> out;
  for (const auto& [name, table] : versions_) {
    const std::shared_ptr<Function>& f = functions_.at(table.serving);
    FunctionStatus s;
    s.spec = f->spec;
    s.spec.name = name;
    s.version = f->number;
    if (!table.deploying.empty()) s.deploying_version = functions_.at(table.deploying)->number;
    s.queued = f->queue.size();
    if (f->moved_to != nullptr) s.moved_to = f->moved_to->Name();
    s.forwarding = static_cast<size_t>(std::max(0, f->forwarding->load()));
    // A new version's deploy is the one under way, if any.
    s.deploy_stage = table.deploying.empty() ? f->deploy_stage : functions_.at(table.deploying)->deploy_stage;
    for (const auto& inst : f->instances) {
      if (inst->retiring) {
        ++s.ending;
        continue;
      }
      if (inst->state == InstanceState::kStarting) ++s.starting;
      if (inst->state == InstanceState::kIdle) ++s.idle;
      if (inst->state == InstanceState::kBusy) ++s.busy;
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<std::string>> InstanceManager::Impl::LogFiles(const std::string& name) const {
  {
    std::lock_guard lock(mu_);
    if (versions_.count(name) == 0) return Status::NotFound("no function '" + name + "'");
  }
  // <name>-<pid>.log or <name>@<n>-<pid>.log (its versions') exactly: another function's name may
  // begin with this one's and a dash.
  std::vector<std::pair<std::filesystem::file_time_type, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(logs_dir_, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= name.size() + 5 || file.compare(0, name.size(), name) != 0 ||
        file.compare(file.size() - 4, 4, ".log") != 0) {
      continue;
    }
    std::string_view rest = std::string_view(file).substr(name.size(), file.size() - name.size() - 4);
    if (rest.front() == '@') {  // a version's: @<n>
      const size_t dash = rest.find('-');
      if (dash == std::string_view::npos || dash == 1 ||
          rest.substr(1, dash - 1).find_first_not_of("0123456789") != std::string_view::npos) {
        continue;
      }
      rest.remove_prefix(dash);
    }
    if (rest.size() < 2 || rest.front() != '-' || rest.substr(1).find_first_not_of("0123456789") != std::string_view::npos) {
      continue;
    }
    std::error_code time_ec;
    found.emplace_back(entry.last_write_time(time_ec), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [when, path] : found) paths.push_back(std::move(path));
  return paths;
}

std::optional<FunctionSpec> InstanceManager::Impl::Spec(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = functions_.find(ServingKeyLocked(name));
  if (it == functions_.end()) return std::nullopt;
  FunctionSpec spec = it->second->spec;
  spec.name = it->second->name;
  return spec;
}

void InstanceManager::Impl::Invoke(const std::string& name, InvokeCall call, std::function<void(InvokeOutcome)> done) {
  const Clock::time_point now = Clock::now();
  // No timeout: Submit gives it the function's default, under the lock it takes anyway.
  const Clock::time_point deadline = call.timeout.count() > 0 ? now + call.timeout : Clock::time_point{};
  Submit(name, Invocation{.request = std::move(call.request),
                          .deadline = deadline,
                          .done = std::move(done),
                          .arrived = now,
                          .mode = call.mode,
                          .on_piece = std::move(call.on_piece),
                          .then = {},
                          .request_id = std::move(call.request_id)});
}

void InstanceManager::Impl::Submit(const std::string& name, Invocation inv) {
  const RestoreMode mode = inv.mode;
  bool stopping = false;
  bool overloaded = false;
  std::shared_ptr<PeerNode> moved_to;
  std::shared_ptr<std::atomic<int>> forwarding;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    auto it = functions_.find(ServingKeyLocked(name));
    if (inv.deadline == Clock::time_point{}) {
      // The function's own default deadline, else phosd's.
      inv.deadline = inv.arrived + (it != functions_.end() && it->second->spec.timeout_ms > 0
                                        ? std::chrono::milliseconds(it->second->spec.timeout_ms)
                                        : options_.invoke_timeout);
    }
    if (!stopping && it != functions_.end() && it->second->moved_to != nullptr) {
      // Forwarded, and bounded as its queue here would be: answers there come back through this node.
      const Function& f = *it->second;
      overloaded = f.spec.max_queue > 0 && f.forwarding->load() >= f.spec.max_queue;
      if (!overloaded) {
        moved_to = f.moved_to;
        forwarding = f.forwarding;
        ++*forwarding;
      }
    } else if (!stopping && it != functions_.end()) {
      std::shared_ptr<Function> f = it->second;
      bool deployed = f->deploy == DeployState::kDeployed;
      bool restore = false;
      if (deployed) {
        switch (mode) {
          case RestoreMode::kAuto:
            // Warm when an idle instance will take it, else a new instance restored for it while
            // the function is below max_instances (else it waits for an instance).
            restore = IdleLocked(*f) <= static_cast<int>(f->queue.size()) && LiveLocked(*f) < MaxInstances(f->spec);
            break;
          case RestoreMode::kWarm:
            restore = f->instances.empty();
            break;
          default:
            restore = true;
        }
      }
      if (restore) {
        RestoreMode how = mode == RestoreMode::kAuto || mode == RestoreMode::kWarm ? RestoreMode::kPhos : mode;
        StartInstanceLocked(f, how, std::move(inv), /*extra=*/true);
        return;
      }
      overloaded = f->spec.max_queue > 0 && f->queue.size() >= static_cast<size_t>(f->spec.max_queue);
      if (!overloaded) {
        f->queue.push_back(std::move(inv));
        f->cv.notify_one();
        supervisor_cv_.notify_all();  // it watches queued deadlines
        return;
      }
    }
  }
  if (overloaded) {
    metrics_.RecordOverload();
    return inv.done(Outcome(InvokeOutcome::Kind::kOverloaded,
                            "function '" + name + "' has as many invocations waiting as its max_queue allows"));
  }
  if (moved_to != nullptr) {
    Forward(name, moved_to, std::move(forwarding), std::move(inv));
  } else if (stopping) {
    inv.done(Outcome(InvokeOutcome::Kind::kStopping, "phosd is shutting down"));
  } else {
    inv.done(Outcome(InvokeOutcome::Kind::kUnknownFunction, "function '" + name + "' is not registered"));
  }
}

void InstanceManager::Impl::Shutdown() {
  std::vector<Invocation> orphans;
  std::vector<std::function<void(DeployOutcome)>> deploys;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [name, f] : functions_) {
      for (Invocation& inv : f->queue) orphans.push_back(std::move(inv));
      f->queue.clear();
      for (auto& cb : f->deployed_callbacks) deploys.push_back(std::move(cb));
      f->deployed_callbacks.clear();
      f->cv.notify_all();
      f->slot_cv.notify_all();
    }
    supervisor_cv_.notify_all();
  }
  uint64_t one = 1;
  if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof(one)) < 0) {
    PHOS_LOG(Warn, "instances", "cannot signal stop: {}", std::strerror(errno));
  }
  for (Invocation& inv : orphans) inv.done(Outcome(InvokeOutcome::Kind::kStopping, "phosd is shutting down"));
  for (auto& cb : deploys) cb(DeployFailed(Status::FailedPrecondition("phosd is shutting down")));
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

std::shared_ptr<Instance> InstanceManager::Impl::StartInstanceLocked(const std::shared_ptr<Function>& f,
                                                                     RestoreMode mode, std::optional<Invocation> first,
                                                                     bool extra) {
  auto inst = std::make_shared<Instance>();
  inst->id = ++next_instance_id_;
  inst->extra = extra;
  if (first.has_value()) {
    inst->for_request = true;
    ++request_restores_;
  }
  f->instances.push_back(inst);
  live_.push_back(inst);
  PublishDemandLocked();
  inst->thread = std::thread([this, f, inst, mode, first = std::move(first)]() mutable {
    RunInstance(f, inst, mode, std::move(first));
  });
  return inst;
}

// Joins the threads of instances that have ended; called with mu_ held (they no longer take it).
void InstanceManager::Impl::JoinFinishedLocked() {
  for (auto& inst : finished_) {
    if (inst->thread.joinable()) inst->thread.join();
    live_.erase(std::remove(live_.begin(), live_.end(), inst), live_.end());
  }
  finished_.clear();
}

// ---- one instance's life ----

void InstanceManager::Impl::RunInstance(std::shared_ptr<Function> f, std::shared_ptr<Instance> inst, RestoreMode mode,
                                        std::optional<Invocation> first) {
  const FunctionSpec spec = f->spec;  // copied once: the spec does not change after registration
  bool learn = false;
  std::shared_ptr<Move> restoring;  // the move whose target this iteration's process is
  {
    // An instance AdoptSnapshot started completes a move from another node: restored once.
    std::lock_guard lock(mu_);
    restoring = inst->moving;
  }
  if (SnapshotsEnabled() && mode != RestoreMode::kColdBoot) {
    std::lock_guard lock(mu_);
    // An instance started for a request (the deploy's sample, a forced restore mode) learns even
    // while an idle warm instance is learning: that one may never be asked before it ends.
    if (f->deploy == DeployState::kDeployed && !f->slots.empty() && f->slots[0].version != 0 &&
        (!f->learning || first.has_value()) && !options_.sessions->HasFirstTouch(spec.name, f->slots[0].version)) {
      f->learning = learn = true;
    }
  }
  StartReport report;
  report.mode = mode;
  bool started = false;
  Clock::time_point deadline = first ? first->deadline : Clock::now() + options_.start_timeout;
  Status ended = Status::Unavailable("the instance ended before it was ready on the target device");
  const bool learned = learn;  // this instance holds f->learning until it ends
  while (true) {
    Result<InstanceProcess> made = MakeProcess(f, *inst, mode, learn, deadline, &report);
    if (!made.ok() && report.gave_way) {
      PHOS_LOG(Info, "instances", "function '{}': {}", spec.name, made.status().message());
      started = true;  // not a failure: no backoff
    } else if (!made.ok() && first && WasReplaced(*f)) {
      // Its version was replaced while it waited for a range: the version serving now takes the
      // invocation, as it took those queued (SwapInLocked).
      PHOS_LOG(Info, "instances", "'{}' was replaced; its invocation goes to the version serving now", spec.name);
      started = true;  // not a failure: no backoff
      Submit(f->name, std::move(*first));
      first.reset();
    } else if (!made.ok()) {
      PHOS_LOG(Error, "instances", "function '{}': {}", spec.name, made.status().ToString());
      ended = made.status();
      if (first) first->done(Outcome(InvokeOutcome::Kind::kInstanceLost, "no instance could be started: " + made.status().message()));
    } else {
      InstanceProcess proc = std::move(made).value();
      {
        std::lock_guard lock(mu_);
        inst->pid = proc.pid;
        inst->mode = report.mode;
        inst->restored = report.restored;
      }
      started = Serve(f, inst, spec, proc, report, std::move(first), learn);
      close(proc.channel_fd);
    }
    // A migration's final stop ended the process: the instance's range, switched to the target
    // device, is restored there, once this session's end has unmapped it.
    // A move still set and the one this process was restored for: it never became ready there.
    std::shared_ptr<Move> move;
    {
      std::lock_guard lock(mu_);
      if (inst->moving == nullptr || inst->moving == restoring || !made.ok() || stopping_ || f->removed) break;
      inst->state = InstanceState::kStarting;
      move = inst->moving;
    }
    // Marked moving before its process ended (RunFinalStop): ended here or by the API server once
    // the process was gone, its range is unmapped and zeroed behind.
    if (options_.sessions != nullptr && !report.token.empty()) options_.sessions->EndSession(report.token);
    move->released = Clock::now();
    report.token.clear();
    // To another node: the instance ends here once it serves there.
    if (move->node != nullptr && SendToNode(f, *inst, *move)) break;
    restoring = move;
    report = StartReport{};
    report.mode = mode = RestoreMode::kPhos;
    first.reset();
    learn = false;
    deadline = Clock::now() + options_.start_timeout;
  }
  AnswerMove(*inst, ended);  // a move still under way did not get there
  {
    std::lock_guard lock(mu_);
    RetireLocked(*f, *inst);
    DoneRestoringLocked(*inst);
  }
  FailPendingCheckpoints(*inst, Status::Unavailable("the instance ended before it was checkpointed"));
  // The session's end scrubs the instance's range (zeroed, unmapped; unmapped and zeroed behind when
  // it was marked moving and the move was given up) and returns its context: here, on the
  // instance's own thread, while restores use the other ranges.
  if (options_.sessions != nullptr && !report.token.empty()) options_.sessions->EndSession(report.token);
  std::vector<Slot> gone;  // the function was removed: its ranges go back once their instances have
  std::unique_lock lock(mu_);
  metrics_.RecordRetire(std::chrono::duration<double>(Clock::now() - inst->retired_at).count());
  for (auto it = f->slots.begin(); it != f->slots.end();) {
    if (it->holder == inst->id) it->holder = 0;
    if (it->holder == 0 && f->removed) {
      gone.push_back(*it);
      it = f->slots.erase(it);
    } else {
      ++it;
    }
  }
  f->slot_cv.notify_all();
  PublishDemandLocked();
  if (!gone.empty()) {
    lock.unlock();
    ReleaseSlots(gone);
    lock.lock();
  }
  if (learned) f->learning = false;
  f->instances.erase(std::remove(f->instances.begin(), f->instances.end(), inst), f->instances.end());
  if (started) {
    f->start_failures = 0;
  } else {
    // Exponential backoff so that a function that cannot start does not spin.
    auto delay = options_.restart_backoff * (1 << std::min(f->start_failures, 6));
    f->next_start = Clock::now() + std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(30));
    ++f->start_failures;
  }
  // Told, and the last instance of a replaced version's resources dropped (nothing of it runs any
  // more), before this thread is handed to the supervisor, which joins it holding the lock.
  const bool last_of_replaced = f->replaced && f->instances.empty();
  if (inst->pid > 0 || last_of_replaced) {
    lock.unlock();
    if (inst->pid > 0) Emit(InstanceEvent::Kind::kEnded, *f, *inst);
    if (last_of_replaced) DropVersionResources(f->spec.name);
    lock.lock();
  }
  finished_.push_back(inst);
  supervisor_cv_.notify_all();
}

// Returns whether the instance became ready. Ends the process before returning.
bool InstanceManager::Impl::Serve(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst,
                                  const FunctionSpec& spec, const InstanceProcess& proc, StartReport report,
                                  std::optional<Invocation> first, bool learning) {
  const std::string who = "instance " + std::to_string(inst->id) + " of '" + spec.name + "' (pid " +
                          std::to_string(proc.pid) + ")";
  int ready = WaitReadable(proc.channel_fd, stop_fd_, Clock::now() + options_.start_timeout);
  auto fail_first = [&](InvokeOutcome::Kind kind, const std::string& why) {
    if (first) first->done(Outcome(kind, why));
  };
  if (ready <= 0) {
    std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
    if (ready == 0) PHOS_LOG(Error, "instances", "{} not ready within {} ms; {}", who, options_.start_timeout.count(), how);
    fail_first(ready == 0 ? InvokeOutcome::Kind::kTimeout : InvokeOutcome::Kind::kStopping,
               ready == 0 ? "the instance did not start in time" : "phosd is shutting down");
    return ready < 0;  // stopping is not a start failure
  }
  Result<ipc::invoke::Frame> hello = ipc::invoke::ReadFrame(proc.channel_fd);
  if (!hello.ok() || hello->kind != ipc::invoke::FrameKind::kReady) {
    std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(100));
    PHOS_LOG(Error, "instances", "{} failed before its ready frame ({}); {}; log: {}", who,
             hello.ok() ? "unexpected frame" : hello.status().ToString(), how, proc.log_path);
    // What the function said last is usually why (a cold boot out of device memory, say).
    std::string said = LastLogLine(proc.log_path);
    fail_first(InvokeOutcome::Kind::kInstanceLost,
               "the function instance failed to start: " + how + (said.empty() ? "" : ": " + said));
    return false;
  }
  report.ready = Clock::now();
  // An SDK that takes request ids says so in its ready frame (older ones send it empty).
  const bool takes_ids = ipc::invoke::TakesRequestIds(hello->payload);
  hello->payload = std::string();  // a function's ready payload is not kept for the instance's life
  PHOS_LOG(Info, "instances", "{} ready ({})", who, RestoreModeName(report.mode));
  Emit(report.restored ? InstanceEvent::Kind::kRestored : InstanceEvent::Kind::kStarted, *f, *inst);
  AnswerMove(*inst, Status::Ok());  // a migrated instance is back
  // Before the caller hears back: whoever waits for a sample request's answer finds its order saved.
  auto after_request = [&] {
    if (!learning) return;
    std::vector<uint64_t> versions;
    {
      std::lock_guard lock(mu_);
      versions = VersionsLocked(*f);
    }
    // Another learner saved the order first (the sample's is kept): this one's is taken and dropped,
    // which ends its learning.
    if (!versions.empty() && options_.sessions->HasFirstTouch(spec.name, versions[0])) versions.clear();
    if (options_.sessions->SaveFirstTouch(report.token, spec.name, versions) || versions.empty()) learning = false;
  };
  if (first) {
    {
      std::lock_guard lock(mu_);
      inst->state = InstanceState::kBusy;
      PublishDemandLocked();
    }
    std::optional<PendingCheckpoint> then = std::move(first->then);
    bool keep = Handle(proc, who, std::move(*first), &report, after_request, takes_ids);
    {
      std::lock_guard lock(mu_);
      DoneRestoringLocked(*inst);
    }
    keep = CheckpointAfter(f, inst, proc, report, std::move(then), keep);
    if (!keep) return true;
  }
  {
    std::lock_guard lock(mu_);
    inst->state = InstanceState::kIdle;
    f->slot_cv.notify_all();  // an idle instance may make way for a restore
    PublishDemandLocked();
  }
  bool evicted = false;
  while (true) {
    Invocation inv;
    std::optional<PendingCheckpoint> checkpoint;
    {
      std::unique_lock lock(mu_);
      auto wanted = [&] {
        return stopping_ || f->removed || inst->evict || !inst->checkpoints.empty() || !f->queue.empty();
      };
      if (inst->extra) {
        const std::chrono::milliseconds keep_alive =
            spec.keep_alive_ms > 0 ? std::chrono::milliseconds(spec.keep_alive_ms) : options_.keep_alive;
        if (!f->cv.wait_for(lock, keep_alive, wanted)) {
          PHOS_LOG(Info, "instances", "{} idle for {} ms; ending it", who, keep_alive.count());
          RetireLocked(*f, *inst);
          break;
        }
      } else {
        f->cv.wait(lock, wanted);
      }
      if (stopping_ || f->removed) {
        RetireLocked(*f, *inst);
        break;
      }
      if (inst->evict) {
        PHOS_LOG(Info, "instances", "{} ends: a restore needs its place", who);
        evicted = true;
        break;
      }
      // A checkpoint goes before queued requests: it was asked of this instance, at its next idle point.
      if (!inst->checkpoints.empty()) {
        checkpoint = std::move(inst->checkpoints.front());
        inst->checkpoints.pop_front();
      } else {
        inv = std::move(f->queue.front());
        f->queue.pop_front();
      }
      inst->state = InstanceState::kBusy;
    }
    std::optional<PendingCheckpoint> then = std::move(inv.then);
    bool keep = checkpoint ? RunCheckpoint(f, inst, proc, report, std::move(*checkpoint))
                           : Handle(proc, who, std::move(inv), nullptr, after_request, takes_ids);
    keep = CheckpointAfter(f, inst, proc, report, std::move(then), keep);
    if (!keep) return true;  // ended (or moving: not idle meanwhile, nobody evicts it)
    std::lock_guard lock(mu_);
    inst->state = InstanceState::kIdle;
    f->slot_cv.notify_all();
  }
  if (evicted) Emit(InstanceEvent::Kind::kEvicted, *f, *inst);
  // Orderly end: closing the channel makes the serve loop return 0.
  shutdown(proc.channel_fd, SHUT_RDWR);
  std::string how = EndInstanceProcess(proc.pid, options_.stop_grace);
  PHOS_LOG(Info, "instances", "{} stopped: {}", who, how);
  return true;
}

// Runs one invocation; returns false when the instance must be discarded (it has been ended).
bool InstanceManager::Impl::Handle(const InstanceProcess& proc, const std::string& who, Invocation inv,
                                   const StartReport* report, const std::function<void()>& before_answer,
                                   bool send_request_id) {
  if (inv.deadline <= Clock::now()) {
    inv.done(Outcome(InvokeOutcome::Kind::kTimeout, "the deadline passed while the request was queued"));
    return true;
  }
  Status sent = Status::Ok();
  if (send_request_id && !inv.request_id.empty()) {
    sent = ipc::invoke::WriteFrame(proc.channel_fd, ipc::invoke::FrameKind::kRequestId, inv.request_id);
  }
  if (sent.ok()) sent = ipc::invoke::WriteFrame(proc.channel_fd, ipc::invoke::FrameKind::kRequest, inv.request);
  StartReport warm;
  const StartReport& started = report != nullptr ? *report : warm;
  // The next frame of the answer; false (the invocation answered, the instance discarded) when
  // the deadline passed, phosd stops, or the function sent something else than an answer.
  Result<ipc::invoke::Frame> frame = Status::Unavailable("no frame read yet");
  bool streamed = false;  // pieces went to inv.on_piece: a failure now cuts the answer short
  auto fail = [&](InvokeOutcome::Kind kind, const std::string& why) {
    InvokeOutcome o = Outcome(kind, why);
    o.streamed = streamed;
    inv.done(std::move(o));
    return false;
  };
  auto lost = [&](const std::string& why) {
    std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(200));
    PHOS_LOG(Warn, "instances", "{} lost during a request ({}); {}; log: {}", who, why, how, proc.log_path);
    return fail(InvokeOutcome::Kind::kInstanceLost, "the function instance failed: " + how);
  };
  auto next_frame = [&] {
    int readable = WaitReadable(proc.channel_fd, stop_fd_, inv.deadline);
    if (readable == 0) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      PHOS_LOG(Warn, "instances", "{} timed out; discarded ({})", who, how);
      return fail(InvokeOutcome::Kind::kTimeout, "the function did not answer before the deadline");
    }
    if (readable < 0) {
      EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      return fail(InvokeOutcome::Kind::kStopping, "phosd is shutting down");
    }
    frame = ipc::invoke::ReadFrame(proc.channel_fd);
    using ipc::invoke::FrameKind;
    if (!frame.ok()) return lost(frame.status().message());
    if (frame->kind != FrameKind::kResponse && frame->kind != FrameKind::kError && frame->kind != FrameKind::kPiece) {
      return lost("sent an unexpected frame");
    }
    return true;
  };
  if (!sent.ok()) return lost(sent.message());
  if (!next_frame()) return false;
  const Answered answered = AnswerBegins(started);  // the first byte of the answer
  std::string gathered;  // pieces nobody streams
  uint64_t answer_bytes = 0;  // the whole answer, streamed or gathered, is capped like one frame
  while (frame->kind == ipc::invoke::FrameKind::kPiece) {
    answer_bytes += frame->payload.size();
    if (answer_bytes > ipc::invoke::kMaxFramePayload) {
      return lost(fmt::format("an answer in pieces longer than {} bytes", ipc::invoke::kMaxFramePayload));
    }
    if (inv.on_piece) {
      if (!streamed) {
        InvokeOutcome head;
        FillStages(inv, started, answered, &head);
        inv.on_piece(std::move(frame->payload), &head);
      } else {
        inv.on_piece(std::move(frame->payload), nullptr);
      }
      streamed = true;
    } else {
      gathered += frame->payload;
    }
    if (!next_frame()) return false;
  }
  if (frame->kind == ipc::invoke::FrameKind::kResponse &&
      answer_bytes + frame->payload.size() > ipc::invoke::kMaxFramePayload) {
    return lost(fmt::format("an answer in pieces longer than {} bytes", ipc::invoke::kMaxFramePayload));
  }
  if (frame->kind == ipc::invoke::FrameKind::kError && report != nullptr && report->restored &&
      !report->token.empty()) {
    // A restore that loads while the process runs can fail after it resumed (the device out of
    // memory): every call of the instance then fails, and so does the function. The caller hears
    // why, and the instance is not kept to fail the next request too.
    Status restored = options_.sessions->WaitPrepared(report->token, std::chrono::milliseconds(0));
    if (!restored.ok() && restored.code() != StatusCode::kTimeout) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      PHOS_LOG(Warn, "instances", "{} discarded, its restore failed ({}): {}", who, how, restored.message());
      return fail(InvokeOutcome::Kind::kInstanceLost,
                  fmt::format("no instance could be started: {} restore: {}", RestoreModeName(started.mode),
                              restored.message()));
    }
  }
  InvokeOutcome out;
  out.streamed = streamed;
  if (frame->kind == ipc::invoke::FrameKind::kResponse) {
    out.body = gathered.empty() ? std::move(frame->payload) : gathered + frame->payload;
  } else {
    out.kind = InvokeOutcome::Kind::kFunctionError;
    out.error = ipc::invoke::DecodeError(frame->payload);
  }
  FillStages(inv, started, answered, &out);
  metrics_.Record(out);
  if (report != nullptr) {
    std::string stages;
    for (const auto& [name, us] : out.stages) stages += fmt::format(" {} {:.3f} ms", name, us / 1000.0);
    PHOS_LOG(Info, "restore", "{} served its first request ({}):{}", who, RestoreModeName(out.mode), stages);
  }
  before_answer();
  inv.done(std::move(out));
  return true;
}

Status InstanceManager::Impl::SaveLocked() {
  FunctionRegistry registry;
  for (const auto& [name, table] : versions_) {
    registry.serving.push_back(VersionOf(*functions_.at(table.serving)));
    registry.registered_at_ms[name] = table.registered_at_ms;
    registry.kept.insert(registry.kept.end(), table.kept.begin(), table.kept.end());
  }
  return SaveFunctionRegistry(registry_path_, registry);
}

InstanceManager::InstanceManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InstanceManager::~InstanceManager() { impl_->Shutdown(); }

Result<std::unique_ptr<InstanceManager>> InstanceManager::Open(const InstanceManagerOptions& options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("instance manager: data_dir is required");
  auto impl = std::make_unique<Impl>(options);
  PHOS_RETURN_IF_ERROR(impl->Open().WithContext("instance manager"));
  return std::unique_ptr<InstanceManager>(new InstanceManager(std::move(impl)));
}

Status InstanceManager::Register(const FunctionSpec& spec) { return impl_->Register(spec); }
void InstanceManager::Deploy(const FunctionSpec& spec, std::string sample_request,
                             std::chrono::milliseconds sample_timeout, std::function<void(DeployOutcome)> done) {
  impl_->Deploy(spec, std::move(sample_request), sample_timeout, std::move(done));
}
Status InstanceManager::Remove(const std::string& name) { return impl_->Remove(name); }
Status InstanceManager::RemoveIfHeld(const std::string& name, const HeldFunction& held) {
  return impl_->Remove(name, &held);
}
void InstanceManager::DeployVersion(const FunctionSpec& spec, std::string sample_request,
                                    std::chrono::milliseconds sample_timeout, std::function<void(DeployOutcome)> done) {
  impl_->DeployVersion(spec, std::move(sample_request), sample_timeout, std::move(done));
}
void InstanceManager::Rollback(const std::string& name, uint64_t version, std::function<void(DeployOutcome)> done) {
  impl_->Rollback(name, version, std::move(done));
}
void InstanceManager::Adopt(AdoptedVersion adopted, std::function<void(DeployOutcome)> done) {
  impl_->Adopt(std::move(adopted), std::move(done));
}
Result<std::vector<VersionStatus>> InstanceManager::Versions(const std::string& name) const {
  return impl_->Versions(name);
}
Status InstanceManager::DeleteVersion(const std::string& name, uint64_t version) {
  return impl_->DeleteVersion(name, version);
}
std::vector<FunctionStatus> InstanceManager::List() const { return impl_->List(); }

// What takes a function's name goes to the version serving it (ServingKeyLocked); a version's
// key names nothing from outside (CheckName).
std::optional<FunctionSpec> InstanceManager::Spec(const std::string& name) const {
  return Impl::CheckName(name).ok() ? impl_->Spec(name) : std::nullopt;
}
void InstanceManager::Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
                             std::function<void(InvokeOutcome)> done) {
  Invoke(name, InvokeCall{.request = std::move(request), .timeout = timeout}, std::move(done));
}
void InstanceManager::Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
                             RestoreMode mode, std::function<void(InvokeOutcome)> done) {
  Invoke(name, InvokeCall{.request = std::move(request), .timeout = timeout, .mode = mode}, std::move(done));
}
void InstanceManager::Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
                             RestoreMode mode, PieceCallback on_piece, std::function<void(InvokeOutcome)> done) {
  Invoke(name, InvokeCall{.request = std::move(request), .timeout = timeout, .mode = mode, .on_piece = std::move(on_piece)},
         std::move(done));
}
void InstanceManager::Invoke(const std::string& name, InvokeCall call, std::function<void(InvokeOutcome)> done) {
  if (Status named = Impl::CheckName(name); !named.ok()) {
    return done(Outcome(InvokeOutcome::Kind::kUnknownFunction, named.message()));
  }
  impl_->Invoke(name, std::move(call), std::move(done));
}
void InstanceManager::Shutdown() { impl_->Shutdown(); }
Result<std::vector<InstanceStatus>> InstanceManager::Instances(const std::string& name) const {
  PHOS_RETURN_IF_ERROR(Impl::CheckName(name));
  return impl_->Instances(name);
}
Result<JobStatus> InstanceManager::Job(const std::string& name) const {
  PHOS_RETURN_IF_ERROR(Impl::CheckName(name));
  return impl_->Job(name);
}

void InstanceManager::Checkpoint(const std::string& name, uint64_t instance, CheckpointMode mode,
                                 std::function<void(CheckpointOutcome)> done) {
  if (Status named = Impl::CheckName(name); !named.ok()) return done(CheckpointOutcome{.status = named});
  impl_->Checkpoint(name, instance, mode, std::move(done));
}
void InstanceManager::Migrate(const std::string& name, uint64_t instance, MigrationTarget target,
                              std::function<void(MigrationOutcome)> done) {
  if (Status named = Impl::CheckName(name); !named.ok()) return done(MigrationOutcome{.status = named});
  impl_->Migrate(name, instance, std::move(target), std::move(done));
}

// Every version's logs: the function's name.
Result<std::vector<std::string>> InstanceManager::LogFiles(const std::string& name) const {
  return impl_->LogFiles(name);
}

void InstanceManager::AdoptSnapshot(const std::string& name, int va_slot, uint64_t version,
                                    std::function<void(MigrationOutcome)> done) {
  if (Status named = Impl::CheckName(name); !named.ok()) return done(MigrationOutcome{.status = named});
  impl_->AdoptSnapshot(name, va_slot, version, std::move(done));
}

}  // namespace phos::runtime
