// Deploy (docs/design.md D5, D9): run a function to its entry point, capture its GPU state into a
// snapshot and keep its CPU state; and the making of restored instances in each restore mode.
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include <fmt/core.h>

#include "instance_manager_impl.h"
#include "phos/base/fault_point.h"
#include "phos/base/log.h"
#include "phos/ipc/instance_channel.h"

namespace phos::runtime {
namespace {

constexpr const char* kSnapshotEnv = "PHOS_SNAPSHOT_VERSION";

}  // namespace

void InstanceManager::Impl::Deploy(const FunctionSpec& spec, std::string sample_request,
                                   std::chrono::milliseconds sample_timeout, std::function<void(DeployOutcome)> done) {
  if (!SnapshotsEnabled()) {
    DeployOutcome registered = DeployFailed(Register(spec));
    registered.contexts_ready = true;
    if (registered.status.ok()) registered.version = 1;
    done(std::move(registered));
    return;
  }
  if (Status valid = Validate(spec); !valid.ok()) {
    done(DeployFailed(valid));
    return;
  }
  Status refused;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      refused = Status::FailedPrecondition("phosd is shutting down");
    } else if (versions_.count(spec.name) != 0) {
      refused = Status::AlreadyExists("function '" + spec.name + "' is already registered; deploy it as a new version");
    } else if (options_.sandbox != nullptr &&
               !(refused = options_.sandbox->PrepareFunction(spec)).ok()) {  // its cgroup, before any process
      refused = refused.WithContext("register function '" + spec.name + "'");
    } else {
      std::shared_ptr<Function> f = AddFunctionLocked(spec);
      refused = SaveLocked();
      if (refused.ok()) {
        f->deployed_callbacks.push_back(std::move(done));
        StartDeployLocked(f, std::move(sample_request), sample_timeout);
        StartJobLocked(f, /*fresh=*/true);
        PHOS_LOG(Info, "instances", "deploying '{}' ({})", spec.name, spec.executable);
        return;
      }
      ForgetLocked(spec.name);
      if (options_.sandbox != nullptr) options_.sandbox->RemoveFunction(spec.name);
      refused = refused.WithContext("register function '" + spec.name + "'");
    }
  }
  done(DeployFailed(refused));
}

void InstanceManager::Impl::StartDeployLocked(const std::shared_ptr<Function>& f, std::string sample_request,
                                              std::chrono::milliseconds sample_timeout) {
  f->deploy = DeployState::kDeploying;
  // The contexts its restores will lease are made while it deploys, not when they are asked for.
  PublishDemandLocked();
  auto owner = std::make_shared<Instance>();  // the deploy's thread, joined like an instance's
  owner->id = ++next_instance_id_;
  live_.push_back(owner);
  owner->thread = std::thread([this, f, owner, sample = std::move(sample_request), sample_timeout]() mutable {
    RunDeploy(f, owner, std::move(sample), sample_timeout);
  });
}

void InstanceManager::Impl::RunDeploy(std::shared_ptr<Function> f, std::shared_ptr<Instance> owner,
                                      std::string sample_request, std::chrono::milliseconds sample_timeout) {
  const std::string name = f->spec.name;
  // One slot per instance range (InstanceRanges): each is the function run to its entry point in
  // its own range (deploys of the same function share their chunks in the store).
  std::vector<Slot> slots;
  Status outcome;
  // The executable's digest, taken here, off every lock and the caller's thread: what the version
  // records, and for a rollback what it must still be.
  const std::string digest = FileSha256Hex(f->spec.executable);
  {
    std::lock_guard lock(mu_);
    if (!f->expected_sha256.empty()) {
      FunctionVersion v = VersionOf(*f);
      v.executable_sha256 = f->expected_sha256;
      outcome = ExecutableChanged(v, digest);
    }
    f->executable_sha256 = digest;
  }
  // An adoption's snapshots are fetched from the other node's upload while its ranges run to their
  // entry points here: the two take about as long, and neither needs the other until the capture.
  std::shared_future<Result<std::vector<uint64_t>>> imports;
  if (f->adopted != nullptr && outcome.ok()) {
    imports = std::async(std::launch::async, [f]() -> Result<std::vector<uint64_t>> {
                Result<std::vector<uint64_t>> got = f->adopted->import(f->spec.name);
                if (!got.ok()) return got.status().WithContext("fetch its snapshots");
                if (got->size() != f->adopted->va_slots.size()) {
                  return Status::Internal(fmt::format("{} snapshots fetched for {} instance ranges", got->size(),
                                                      f->adopted->va_slots.size()));
                }
                return got;
              }).share();
  }
  DeployOutcome warmup;  // the first range's
  for (int i = 0; i < InstanceRanges(f->spec) && outcome.ok(); ++i) {
    Result<Slot> slot = DeployOnce(f, i == 0 ? &warmup : nullptr, i, imports.valid() ? &imports : nullptr);
    if (slot.ok()) {
      slots.push_back(*slot);
    } else {
      outcome = slot.status();
    }
  }
  // A fetch still under way (a range failed before it needed it) ends before the deploy does: what
  // it commits is then dropped with the rest of a failed deploy's snapshots, and nobody waits for
  // it under the manager's lock (the supervisor joins this thread there).
  if (imports.valid()) imports.wait();
  std::vector<std::function<void(DeployOutcome)>> callbacks;
  std::vector<Slot> orphans;  // deployed for a function removed meanwhile, or a failed deploy's
  bool deployed = false;
  std::optional<TakeDown> replaced;  // the version this one replaced (Function::replacing)
  bool drop_replaced = false;
  bool forgotten = false;  // a failed deploy someone asked for: its snapshots and cgroup go
  {
    std::lock_guard lock(mu_);
    callbacks.swap(f->deployed_callbacks);
    if (outcome.ok() && (f->removed || stopping_)) {
      orphans = std::move(slots);
    } else if (outcome.ok()) {
      deployed = true;
      f->deploy = DeployState::kDeployed;
      f->slots = std::move(slots);
      f->cv.notify_all();  // a job's driver waits for the deploy
      f->start_failures = 0;
      f->next_start = {};
      if (f->replacing) replaced = SwapInLocked(f, &drop_replaced);
    } else if (outcome.code() == StatusCode::kNotSupported) {
      // Served the way functions without snapshots are: each instance spawned and started.
      f->deploy = DeployState::kNone;
      PHOS_LOG(Warn, "instances", "'{}' is not snapshotted: {}", name, outcome.message());
      outcome = Status::Ok();
      orphans = std::move(slots);
      if (f->replacing && !f->removed && !stopping_) replaced = SwapInLocked(f, &drop_replaced);
    } else {
      orphans = std::move(slots);
      if (!callbacks.empty() && !f->removed) {
        // A deploy someone asked for: the function is not registered unless it deploys.
        PHOS_LOG(Warn, "instances", "deploy of '{}' failed; not registered: {}", name, outcome.message());
        if (auto it = functions_.find(name); it != functions_.end() && it->second == f) ForgetLocked(name);
        f->removed = true;
        forgotten = true;
        f->cv.notify_all();
        SaveLocked().IgnoreError();
      } else {
        f->deploy = DeployState::kFailed;
        auto delay = options_.restart_backoff * (1 << std::min(f->start_failures, 6));
        f->next_start = Clock::now() + std::min<std::chrono::milliseconds>(delay, std::chrono::seconds(30));
        ++f->start_failures;
        PHOS_LOG(Error, "instances", "deploy of '{}' failed, retried in {} ms: {}", name,
                 std::chrono::duration_cast<std::chrono::milliseconds>(f->next_start - Clock::now()).count(),
                 outcome.message());
      }
    }
    PublishDemandLocked();
    supervisor_cv_.notify_all();
  }
  ReleaseSlots(orphans);
  if (replaced) FinishTakeDown(*replaced, "", drop_replaced);
  if (forgotten) DropVersionResources(name);
  if (deployed) {
    std::vector<uint64_t> versions;
    {
      std::lock_guard lock(mu_);
      versions = VersionsLocked(*f);
    }
    options_.sessions->RetainOnly(name, versions);  // earlier deploys' snapshots
    PHOS_LOG(Info, "instances", "'{}' deployed ({} instance range(s), {})", name, versions.size(),
             options_.cpu_state->name());
  }
  DeployOutcome report = DeployFailed(
      f->adopted != nullptr
          ? outcome.WithContext(fmt::format("adopt version {} of '{}' from the cluster", f->number, f->name))
          : outcome.WithContext("deploy '" + name + "'"));
  if (outcome.ok()) report.version = f->number;
  if (deployed) {
    report.warmed_up = warmup.warmed_up;
    report.pre_entry_bytes = warmup.pre_entry_bytes;
    report.warmed_bytes = warmup.warmed_bytes;
    report.warmup_time = warmup.warmup_time;
  }
  if (deployed && !sample_request.empty()) {
    SetDeployStage(*f, "running the sample request");
    RunSample(f, std::move(sample_request), sample_timeout, &report);
  }
  bool restores = false;  // its instances are restored into pooled contexts
  if (deployed) {
    std::lock_guard lock(mu_);
    restores = f->spec.gpus == 1 && !VersionsLocked(*f).empty();
  }
  report.contexts_ready = deployed && !restores;
  // An adoption is answered at once: an invocation waits for it, and needs one context, not every
  // one the function's restores may lease (the pool fills on meanwhile, as after any deploy).
  if (restores && f->adopted == nullptr) {
    SetDeployStage(*f, "filling the context pool");
    // Answered once a cold start of it can find its context ready: the pool makes them from the
    // moment the deploy began (PublishDemandLocked); a creation takes what it takes.
    // Given up when phosd stops: Shutdown joins this thread, and a pool may take minutes to fill.
    report.contexts_ready = options_.sessions->WaitForContexts(options_.start_timeout, [this] {
      std::lock_guard lock(mu_);
      return stopping_;
    });
    if (!report.contexts_ready) {
      PHOS_LOG(Warn, "instances", "'{}' deployed; the context pool is still short of what its restores may lease", name);
    }
  }
  SetDeployStage(*f, "");
  for (auto& cb : callbacks) cb(report);
  if (deployed && f->announce && options_.on_deployed) {
    DeployedVersion told;
    {
      std::lock_guard lock(mu_);
      told.version = VersionOf(*f);
      for (const Slot& slot : f->slots) told.ranges.push_back({slot.va_slot, f->spec.name, slot.version});
    }
    options_.on_deployed(told);
  }
  std::lock_guard lock(mu_);
  finished_.push_back(owner);
  supervisor_cv_.notify_all();
}

void InstanceManager::Impl::RunSample(const std::shared_ptr<Function>& f, std::string request,
                                      std::chrono::milliseconds timeout, DeployOutcome* outcome) {
  const std::string name = f->spec.name;
  // The sample runs on a restored instance, which records the first-touch order.
  auto answered = std::make_shared<std::promise<InvokeOutcome>>();
  std::future<InvokeOutcome> sample = answered->get_future();
  Invoke(name,
         {.request = std::move(request),
          .timeout = timeout.count() > 0 ? timeout : options_.invoke_timeout,
          .mode = RestoreMode::kPhos},
         [answered](InvokeOutcome o) { answered->set_value(std::move(o)); });
  InvokeOutcome o = sample.get();
  outcome->sample_ran = true;
  outcome->sample = o.kind == InvokeOutcome::Kind::kOk ? Status::Ok() : o.error;
  std::vector<uint64_t> versions;
  {
    std::lock_guard lock(mu_);
    versions = VersionsLocked(*f);
  }
  outcome->first_touch_learned = versions.empty() || options_.sessions->HasFirstTouch(name, versions[0]);
  if (!outcome->sample.ok()) {
    PHOS_LOG(Warn, "instances", "'{}': the sample request failed ({}); {}", name, outcome->sample.message(),
             outcome->first_touch_learned ? "the first-touch order was learned"
                                          : "the order is learned from the first invocation");
  }
}

void InstanceManager::Impl::ReleaseSlots(const std::vector<Slot>& slots) {
  for (const Slot& slot : slots) {
    // A checkpoint's template before the deploy's, the first process of their sandbox.
    for (const CpuStateRef* cpu : {&slot.cpu, &slot.deployed}) {
      if (cpu->id.empty()) continue;
      Status released = options_.cpu_state->Release(*cpu);
      if (!released.ok()) PHOS_LOG(Warn, "instances", "template {} not released: {}", cpu->id, released.message());
    }
    if (slot.va_slot >= 0) options_.sessions->ReleaseVaSlot(slot.va_slot);
  }
}

std::vector<uint64_t> InstanceManager::Impl::VersionsLocked(const Function& f) const {
  std::vector<uint64_t> versions;
  for (const Slot& slot : f.slots) {
    if (slot.version != 0) versions.push_back(slot.version);
  }
  // A job's kept checkpoints, which it resumes from after a restart.
  for (const JobCheckpoint& c : f.job_checkpoints) {
    if (std::find(versions.begin(), versions.end(), c.version) == versions.end()) versions.push_back(c.version);
  }
  return versions;
}

int InstanceManager::Impl::FreeSlotLocked(const Function& f) const {
  for (size_t i = 0; i < f.slots.size(); ++i) {
    if (f.slots[i].holder == 0 && f.slots[i].reserved_for == 0) return static_cast<int>(i);
  }
  return -1;
}

int InstanceManager::Impl::HeldSlotLocked(const Function& f, const Instance& inst) {
  for (size_t i = 0; i < f.slots.size(); ++i) {
    if (f.slots[i].holder == inst.id) return static_cast<int>(i);
  }
  return -1;
}

int InstanceManager::Impl::DeviceOfLocked(const Function& f, const Instance& inst) const {
  const int held = HeldSlotLocked(f, inst);
  if (held >= 0 && f.slots[held].device >= 0) return f.slots[held].device;
  return options_.sessions != nullptr ? options_.sessions->DefaultDevice() : 0;
}

Result<size_t> InstanceManager::Impl::AcquireSlotLocked(const std::shared_ptr<Function>& f, Instance& inst,
                                                        std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                                                        Clock::duration* waited, bool* gave_way) {
  const Clock::time_point start = Clock::now();
  const int most = MaxInstances(f->spec);
  auto take = [&](int free) {
    f->slots[free].holder = inst.id;
    inst.holds_range = true;
    *waited = Clock::now() - start;
    PublishDemandLocked();
    return static_cast<size_t>(free);
  };
  if (inst.wanted_slot >= 0) {
    // AdoptSnapshot's instance: that range (reserved for it), once the instance it asked to end
    // has scrubbed it. The reservation ends here either way.
    const auto wanted = static_cast<size_t>(inst.wanted_slot);
    auto unreserve = [&] {
      if (wanted < f->slots.size() && f->slots[wanted].reserved_for == inst.id) f->slots[wanted].reserved_for = 0;
      f->slot_cv.notify_all();
    };
    while (true) {
      if (stopping_ || f->removed) {
        unreserve();
        return Status::Unavailable("the function is going away");
      }
      if (wanted >= f->slots.size()) return Status::Unavailable("the function's instance range is gone");
      if (f->slots[wanted].holder == 0) {
        unreserve();
        return take(inst.wanted_slot);
      }
      if (f->slot_cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        unreserve();
        return Status::Unavailable(fmt::format("'{}': instance range {} stayed in use", f->spec.name,
                                               f->slots[wanted].va_slot));
      }
    }
  }
  if (!inst.for_request) {
    int free = FreeSlotLocked(*f);
    if (HoldersLocked(*f) >= most || free < 0 || f->slot_waiters > 0) {
      *gave_way = true;
      return Status::Unavailable("no room for a warm instance: restores for requests took it");
    }
    return take(free);
  }
  ++f->slot_waiters;
  struct Waiting {
    int& n;
    ~Waiting() { --n; }
  } waiting{f->slot_waiters};
  while (true) {
    if (stopping_ || f->removed) return Status::Unavailable("the function is going away");
    // At max_instances (of those holding a range; `inst` would be one more): an idle instance
    // makes way (it holds no request). It ends in the background; its range is not the one taken
    // here. Restores waiting for a range queue behind each other rather than count.
    while (HoldersLocked(*f) >= most && EvictIdleLocked(*f)) {
    }
    const bool full = HoldersLocked(*f) >= most;
    const int free = FreeSlotLocked(*f);
    if (!full && free >= 0) return take(free);
    // Woken when an instance becomes idle or retires, or a range is scrubbed.
    if (f->slot_cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      *waited = Clock::now() - start;
      return Status::Unavailable(
          fmt::format("'{}': {} for {} ms", f->spec.name,
                      full ? fmt::format("all {} instances it may run stayed busy", most)
                           : fmt::format("all {} instance ranges stayed in use", f->slots.size()),
                      std::chrono::duration_cast<std::chrono::milliseconds>(*waited).count()));
    }
  }
}

Result<Slot> InstanceManager::Impl::DeployOnce(const std::shared_ptr<Function>& f, DeployOutcome* report, int range,
                                               const std::shared_future<Result<std::vector<uint64_t>>>* imports) {
  const FunctionSpec& spec = f->spec;
  GpuSessions& sessions = *options_.sessions;
  Slot slot;
  int job_va_slot = -1;
  {
    // A job's range, where its checkpoints belong: claimed at start (LoadJobLocked), or again.
    std::lock_guard lock(mu_);
    job_va_slot = f->job_va_slot;
    if (f->job_va_slot_claimed) {
      slot.va_slot = job_va_slot;
      f->job_va_slot_claimed = false;
    }
  }
  if (slot.va_slot < 0 && job_va_slot >= 0) {
    if (Result<int> claimed = sessions.ClaimVaSlotAt(job_va_slot); claimed.ok()) slot.va_slot = *claimed;
  }
  // An adoption's range is the one its snapshot's addresses are in, when it is free here.
  bool adopting = imports != nullptr && range < static_cast<int>(f->adopted->va_slots.size());
  if (slot.va_slot < 0 && adopting) {
    const int wanted = f->adopted->va_slots[range];
    if (Result<int> claimed = sessions.ClaimVaSlotAt(wanted); claimed.ok()) {
      slot.va_slot = *claimed;
    } else {
      PHOS_LOG(Warn, "instances", "'{}': instance range {} is not free here ({}); that range serves its own capture",
               f->spec.name, wanted, claimed.status().message());
      adopting = false;
    }
  }
  if (slot.va_slot < 0) {
    PHOS_ASSIGN_OR_RETURN(slot.va_slot, sessions.ClaimVaSlot());
  }
  Result<std::string> issued = sessions.IssueRestoreToken({.function = spec.name, .va_slot = slot.va_slot, .gpus = spec.gpus});
  if (!issued.ok()) {
    sessions.ReleaseVaSlot(slot.va_slot);
    return issued.status();
  }
  std::string token = *issued;
  Result<InstanceProcess> spawned = SpawnInstanceProcess(
      spec, logs_dir_, ProcessEnv(spec, SessionEnv(token)), options_.sandbox);
  if (!spawned.ok()) {
    sessions.EndSession(token);
    sessions.ReleaseVaSlot(slot.va_slot);
    return spawned.status();
  }
  InstanceProcess proc = *spawned;
  SetDeployStage(*f, "running to its entry point");
  auto fail = [&](const Status& why, const char* stage) -> Status {
    std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(100));
    close(proc.channel_fd);
    sessions.EndSession(token);
    sessions.ReleaseVaSlot(slot.va_slot);
    return why.WithContext(fmt::format("{} (pid {}: {}; log: {})", stage, proc.pid, how, proc.log_path));
  };
  int ready = WaitReadable(proc.channel_fd, stop_fd_, Clock::now() + options_.start_timeout);
  if (ready < 0) return fail(Status::FailedPrecondition("phosd is shutting down"), "deploy");
  if (ready == 0) {
    return fail(Status::Timeout(fmt::format("not at its entry point within {} ms", options_.start_timeout.count())),
                "run to the entry point");
  }
  Result<ipc::invoke::Frame> hello = ipc::invoke::ReadFrame(proc.channel_fd);
  if (!hello.ok() || hello->kind != ipc::invoke::FrameKind::kReady) {
    // What the function said last is usually why (a bad model directory, say): the deploy answers it.
    std::string said = LastLogLine(proc.log_path);
    return fail(Status::Unavailable("the function failed before its entry point" + (said.empty() ? "" : ": " + said)),
                "run to the entry point");
  }
  SetDeployStage(*f, "capturing its GPU state");
  Result<uint64_t> version = sessions.Capture(token, spec.name, {});
  if (!version.ok() && version.status().code() != StatusCode::kNotFound) {
    return fail(version.status(), "capture the GPU state");
  }
  // NotFound: the function made no CUDA call, so there is no GPU state; the CPU state is all.
  slot.version = version.ok() ? *version : 0;
  FaultPoint("deploy-captured");  // the snapshot committed, the CPU state not yet kept
  sessions.EndSession(token);  // the GPU memory goes back: the snapshot holds it now
  SetDeployStage(*f, "keeping its CPU state");
  Result<CpuStateRef> captured = options_.cpu_state->Capture({proc.pid, proc.channel_fd, proc.log_path});
  if (!captured.ok()) {
    // The backend took the process over and ended it.
    sessions.ReleaseVaSlot(slot.va_slot);
    return captured.status().WithContext("capture the CPU state");
  }
  slot.cpu = *captured;
  if (adopting && slot.version != 0) {
    // Its GPU memory went back above: the fetch may still be under way.
    // The deploy's bytes, where this run laid its buffers out as the deploy's did (its process's
    // pointers are their addresses); its own capture is dropped with the deploy's end (RetainOnly).
    // Warm-up requests change both sides: a range that has them serves what it warms up here.
    SetDeployStage(*f, "fetching its snapshots");
    const Result<std::vector<uint64_t>>& fetched = imports->get();
    if (!fetched.ok()) {
      ReleaseSlots({slot});
      return fetched.status();
    }
    const uint64_t imported = (*fetched)[range];
    Status fits = spec.warmup.empty() ? sessions.SameLayout(spec.name, imported, slot.version)
                                      : Status::FailedPrecondition("it has warm-up requests, run here");
    if (fits.ok()) {
      sessions.Stage(spec.name, imported);
      slot.version = imported;
    } else {
      PHOS_LOG(Warn, "instances", "'{}': instance range {} serves its own capture, not the deploy's snapshot: {}",
               spec.name, slot.va_slot, fits.message());
    }
  }
  if (spec.job.checkpoint_every > 0) ResumeJobSlot(*f, &slot);
  if (!spec.warmup.empty()) {
    SetDeployStage(*f, "warming up");
    if (Status warmed = WarmUp(f, &slot, report); !warmed.ok()) {
      ReleaseSlots({slot});
      return warmed;
    }
  }
  return slot;
}

Status InstanceManager::Impl::WarmUp(const std::shared_ptr<Function>& f, Slot* slot, DeployOutcome* report) {
  const FunctionSpec& spec = f->spec;
  GpuSessions& sessions = *options_.sessions;
  std::string token;
  Result<SpawnedProcess> spawned = SpawnFromSlot(spec, *slot, RestoreMode::kPhos, false, false, &token);
  if (!spawned.ok()) {
    if (!token.empty()) sessions.EndSession(token);
    return spawned.status().WithContext("warm up");
  }
  const SpawnedProcess proc = *spawned;
  // The instance ends whatever happens: its range holds the warmed snapshot, or the deploy fails.
  struct End {
    InstanceManager::Impl* self;
    const SpawnedProcess& proc;
    const std::string& token;
    ~End() {
      shutdown(proc.channel_fd, SHUT_RDWR);
      EndInstanceProcess(proc.pid, self->options_.stop_grace);
      close(proc.channel_fd);
      self->options_.sessions->EndSession(token);
    }
  } end{this, proc, token};
  // The instance's start, then each request, gets what an invocation would.
  Clock::time_point deadline = Clock::now() + options_.start_timeout;
  auto next_frame = [&]() -> Result<ipc::invoke::Frame> {
    int ready = WaitReadable(proc.channel_fd, stop_fd_, deadline);
    if (ready < 0) return Status::FailedPrecondition("phosd is shutting down");
    if (ready == 0) return Status::Timeout("no answer in time");
    return ipc::invoke::ReadFrame(proc.channel_fd);
  };
  Result<ipc::invoke::Frame> hello = next_frame();
  if (!hello.ok() || hello->kind != ipc::invoke::FrameKind::kReady) {
    return Status::Unavailable("the restored instance did not start: " +
                               (hello.ok() ? "unexpected frame" : hello.status().message()))
        .WithContext("warm up");
  }
  const Clock::time_point warm_start = Clock::now();
  for (size_t i = 0; i < spec.warmup.size(); ++i) {
    deadline = Clock::now() + options_.invoke_timeout;
    PHOS_RETURN_IF_ERROR(ipc::invoke::WriteFrame(proc.channel_fd, ipc::invoke::FrameKind::kRequest, spec.warmup[i])
                             .WithContext(fmt::format("warm-up request {}", i + 1)));
    Result<ipc::invoke::Frame> answer = next_frame();
    while (answer.ok() && answer->kind == ipc::invoke::FrameKind::kPiece) answer = next_frame();
    if (!answer.ok()) return answer.status().WithContext(fmt::format("warm-up request {}", i + 1));
    if (answer->kind == ipc::invoke::FrameKind::kError) {
      return ipc::invoke::DecodeError(answer->payload).WithContext(fmt::format("warm-up request {} failed", i + 1));
    }
    if (answer->kind != ipc::invoke::FrameKind::kResponse) {
      return Status::Unavailable(fmt::format("warm-up request {}: the function answered frame kind {}", i + 1,
                                             static_cast<int>(answer->kind)));
    }
  }
  const auto warm_time = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - warm_start);
  // Checkpointed where it stands, as a running instance is (instance_checkpoint.cc).
  Result<CpuStateRef> kept = options_.cpu_state->CaptureRunning({proc.pid, proc.channel_fd, proc.log_path});
  if (!kept.ok()) return kept.status().WithContext("warm up: keep the warmed instance's CPU state");
  const CpuStateRef cpu = *kept;
  Result<uint64_t> version = sessions.Capture(token, spec.name, {});
  if (!version.ok() && version.status().code() != StatusCode::kNotFound) {
    options_.cpu_state->Release(cpu).IgnoreError();
    return version.status().WithContext("warm up: capture the warmed instance's GPU state");
  }
  const uint64_t pre_entry = slot->version;
  // A slot being deployed has held no checkpoint before: nothing to release.
  AdoptCheckpoint(*slot, version.ok() ? *version : 0, cpu);
  if (report != nullptr) {
    report->warmed_up = true;
    report->pre_entry_bytes = pre_entry == 0 ? 0 : sessions.SnapshotBytes(spec.name, pre_entry);
    report->warmed_bytes = slot->version == 0 ? 0 : sessions.SnapshotBytes(spec.name, slot->version);
    report->warmup_time = warm_time;
  }
  PHOS_LOG(Info, "instances", "'{}' warmed up in range {} ({} requests, {:.1f} ms): v{} replaces v{}", spec.name,
           slot->va_slot, spec.warmup.size(), warm_time.count() / 1000.0, slot->version, pre_entry);
  return Status::Ok();
}

Result<InstanceProcess> InstanceManager::Impl::MakeProcess(const std::shared_ptr<Function>& f, Instance& inst,
                                                           RestoreMode mode, bool learn, Clock::time_point deadline,
                                                           StartReport* report) {
  report->restored = false;
  std::string* token = &report->token;
  GpuSessions* sessions = options_.sessions;
  FunctionSpec spec;
  Slot slot;
  {
    std::unique_lock lock(mu_);
    spec = f->spec;
    bool deployed = f->deploy == DeployState::kDeployed && SnapshotsEnabled();
    if (deployed) {
      // Every instance of a deployed function holds a slot, a cold boot too (it leaves the range
      // unused): max_instances bounds them all, and the device memory or group they hold. A
      // migrated instance keeps the one it had.
      int index = HeldSlotLocked(*f, inst);
      if (index < 0) {
        PHOS_ASSIGN_OR_RETURN(size_t acquired,
                              AcquireSlotLocked(f, inst, lock, deadline, &report->range_wait, &report->gave_way));
        index = static_cast<int>(acquired);
      }
      slot = f->slots[index];
    } else {
      mode = RestoreMode::kColdBoot;
      deployed = false;
    }
    if (!deployed || mode == RestoreMode::kColdBoot) {
      // A process started from scratch: functions that are not deployed, and the cold-boot mode.
      lock.unlock();
      std::vector<std::pair<std::string, std::string>> env;
      if (sessions != nullptr) {
        if (deployed && spec.gpus == 1) {
          PHOS_ASSIGN_OR_RETURN(*token, sessions->IssueRestoreToken({.function = spec.name, .mode = RestoreMode::kColdBoot}));
        } else {
          // Device groups come from their pool in every mode (no fresh-group variant).
          *token = sessions->IssueToken(spec.gpus, spec.name);
        }
        env = SessionEnv(*token);
      }
      return SpawnInstanceProcess(spec, logs_dir_, ProcessEnv(spec, std::move(env)), options_.sandbox);
    }
  }
  report->restored = slot.version != 0;
  PHOS_ASSIGN_OR_RETURN(SpawnedProcess spawned, SpawnFromSlot(spec, slot, mode, learn, inst.for_request, token));
  return InstanceProcess{spawned.pid, spawned.channel_fd, spawned.log_path};
}

Result<SpawnedProcess> InstanceManager::Impl::SpawnFromSlot(const FunctionSpec& spec, const Slot& slot,
                                                            RestoreMode mode, bool learn, bool urgent,
                                                            std::string* token) {
  GpuSessions* sessions = options_.sessions;
  if (slot.version == 0) {
    *token = sessions->IssueToken(spec.gpus, spec.name);
  } else {
    PHOS_ASSIGN_OR_RETURN(*token, sessions->IssueRestoreToken({.function = spec.name,
                                                               .version = slot.version,
                                                               .mode = mode,
                                                               .learn = learn,
                                                               .va_slot = slot.va_slot,
                                                               .gpus = spec.gpus,
                                                               .urgent = urgent,
                                                               .device = slot.device}));
  }
  if (mode == RestoreMode::kStopTheWorld || mode == RestoreMode::kEager) {
    // Everything copied before the CPU side resumes.
    PHOS_RETURN_IF_ERROR(sessions->WaitPrepared(*token, options_.start_timeout)
                             .WithContext(fmt::format("{} restore", RestoreModeName(mode))));
  }
  ipc::invoke::EnvList env = SessionEnv(*token);
  if (slot.version != 0) env.emplace_back(kSnapshotEnv, std::to_string(slot.version));
  return options_.cpu_state->Spawn(slot.cpu, env);
}

CpuStateRef InstanceManager::Impl::AdoptCheckpoint(Slot& slot, uint64_t version, const CpuStateRef& cpu) {
  CpuStateRef replaced;
  if (slot.deployed.id.empty()) {
    slot.deployed = slot.cpu;
  } else {
    replaced = slot.cpu;
  }
  slot.cpu = cpu;
  slot.version = version;
  return replaced;
}

InstanceManager::Impl::Answered InstanceManager::Impl::AnswerBegins(const StartReport& report) const {
  Answered a{.at = Clock::now()};
  if (report.restored && !report.token.empty() && options_.sessions != nullptr) {
    a.loaded_bytes = static_cast<int64_t>(options_.sessions->Timeline(report.token).loaded_bytes);
  }
  return a;
}

void InstanceManager::Impl::FillStages(const Invocation& inv, const StartReport& report, const Answered& answered,
                                       InvokeOutcome* out) const {
  out->mode = report.mode;
  auto add = [&](const char* name, Clock::time_point at) {
    if (at == Clock::time_point{}) return;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(at - inv.arrived).count();
    out->stages.emplace_back(name, std::max<int64_t>(us, 0));
  };
  auto wait = [&](const char* name, Clock::duration d) {
    out->waits.emplace_back(name, std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  };
  if (report.mode != RestoreMode::kWarm && !report.token.empty() && options_.sessions != nullptr) {
    SessionTimeline t = options_.sessions->Timeline(report.token);
    if (report.restored) wait("range-wait", report.range_wait);
    if (t.leased != Clock::time_point{}) wait("pool-wait", t.pool_wait);
    add("lease", t.leased);
    add("cpu-resume", report.ready);
    add("first-launch", t.first_launch);
    add("first-byte", answered.at);
    add("resident", t.resident);
    if (t.restored) {
      out->speculation_misses = static_cast<int64_t>(t.misses);
      out->loaded_bytes_at_first_byte = answered.loaded_bytes;
      out->snapshot_bytes = static_cast<int64_t>(t.snapshot_bytes);
      out->shared_bytes = static_cast<int64_t>(t.shared_bytes);
    }
    out->modules_loaded = static_cast<int64_t>(t.modules_loaded);
  } else {
    add("first-byte", answered.at);
  }
}

}  // namespace phos::runtime
