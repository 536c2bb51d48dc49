// Checkpoints of running instances (docs/design.md D10): an instance's CPU state kept as a new
// template and its GPU session captured as a new snapshot version, at one point between two of
// its requests; the instance range it holds then restores from there.
#include <fmt/core.h>

#include <algorithm>

#include "instance_manager_impl.h"
#include "phos/base/fault_point.h"
#include "phos/base/log.h"

namespace phos::runtime {
namespace {

constexpr std::pair<CheckpointMode, const char*> kCheckpointModes[] = {
    {CheckpointMode::kStopTheWorld, "stop-the-world"},
    {CheckpointMode::kSoftCow, "soft-cow"},
    {CheckpointMode::kSoftRecopy, "soft-recopy"},
};

const char* StateName(const Instance& inst) {
  if (inst.retiring) return "ending";
  switch (inst.state) {
    case InstanceState::kStarting: return "starting";
    case InstanceState::kIdle: return "idle";
    case InstanceState::kBusy: return "busy";
  }
  return "unknown";
}

std::chrono::microseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

}  // namespace

std::optional<CheckpointMode> ParseCheckpointMode(std::string_view name) {
  for (const auto& [mode, text] : kCheckpointModes) {
    if (name == text) return mode;
  }
  return std::nullopt;
}

const char* CheckpointModeName(CheckpointMode mode) {
  for (const auto& [m, text] : kCheckpointModes) {
    if (m == mode) return text;
  }
  return "unknown";
}

Result<std::vector<InstanceStatus>> InstanceManager::Impl::Instances(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = functions_.find(name);
  if (it == functions_.end()) return Status::NotFound("no function '" + name + "'");
  std::vector<InstanceStatus> out;
  for (const auto& inst : it->second->instances) {
    out.push_back({.id = inst->id, .state = StateName(*inst), .pid = inst->pid, .mode = inst->mode,
                   .restored = inst->restored});
  }
  return out;
}

void InstanceManager::Impl::Checkpoint(const std::string& name, uint64_t instance, CheckpointMode mode,
                                       std::function<void(CheckpointOutcome)> done) {
  auto refuse = [&](Status why) {
    CheckpointOutcome o;
    o.status = std::move(why);
    o.instance = instance;
    o.mode = mode;
    done(std::move(o));
  };
  if (mode != CheckpointMode::kStopTheWorld) {
    return refuse(Status::NotSupported(fmt::format(
        "checkpoint mode '{}' is not built yet; stop-the-world is", CheckpointModeName(mode))));
  }
  std::unique_lock lock(mu_);
  if (stopping_) return refuse(Status::FailedPrecondition("phosd is shutting down"));
  auto it = functions_.find(name);
  if (it == functions_.end()) return refuse(Status::NotFound("no function '" + name + "'"));
  Function& f = *it->second;
  if (f.deploy != DeployState::kDeployed || !SnapshotsEnabled()) {
    return refuse(Status::FailedPrecondition(fmt::format(
        "'{}' is not deployed from a snapshot: its instances are spawned, and a checkpoint has no instance range to "
        "restore from",
        name)));
  }
  // The instance named, or the first idle one, or else the oldest.
  std::shared_ptr<Instance> target;
  for (const auto& inst : f.instances) {
    if (inst->retiring || (instance != 0 && inst->id != instance)) continue;
    if (target == nullptr || (inst->state == InstanceState::kIdle && target->state != InstanceState::kIdle)) {
      target = inst;
    }
  }
  if (target == nullptr) {
    return refuse(Status::NotFound(instance != 0 ? fmt::format("'{}' has no running instance {}", name, instance)
                                                 : fmt::format("'{}' has no running instance", name)));
  }
  target->checkpoints.push_back({mode, std::move(done)});
  f.cv.notify_all();  // the instance's serve loop waits there when idle
}

void InstanceManager::Impl::FailPendingCheckpoints(Instance& inst, const Status& why) {
  std::deque<PendingCheckpoint> pending;
  {
    std::lock_guard lock(mu_);
    pending.swap(inst.checkpoints);
  }
  for (PendingCheckpoint& job : pending) {
    CheckpointOutcome o;
    o.status = why;
    o.instance = inst.id;
    o.mode = job.mode;
    job.done(std::move(o));
  }
}

bool InstanceManager::Impl::RunCheckpoint(const std::shared_ptr<Function>& f, const Instance& inst,
                                          const InstanceProcess& proc, const StartReport& report,
                                          PendingCheckpoint job) {
  const std::string& name = f->spec.name;
  const Clock::time_point start = Clock::now();
  CheckpointOutcome out;
  out.instance = inst.id;
  out.mode = job.mode;
  auto answer = [&](Status status) {
    out.status = std::move(status);
    out.stall = out.total = Since(start);
    job.done(std::move(out));
  };
  const std::string who = fmt::format("instance {} of '{}' (pid {})", inst.id, name, proc.pid);
  if (!report.restored) {
    // A cold-booted instance's memory is not in its instance range, where restores map a snapshot.
    answer(Status::FailedPrecondition(fmt::format(
        "{} was brought up {}, not restored from a snapshot: its GPU memory lies outside its instance range; "
        "checkpoint an instance restored from the function's snapshot",
        who, RestoreModeName(report.mode))));
    return true;
  }
  // The CPU side first: the instance is idle in its serve loop, where it forks; the fork keeps its
  // state as it is now, and the instance sends nothing until its next request.
  Result<CpuStateRef> cpu = options_.cpu_state->CaptureRunning({proc.pid, proc.channel_fd, proc.log_path});
  if (!cpu.ok()) {
    const bool lost = cpu.status().code() == StatusCode::kUnavailable;
    if (lost) {
      std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
      PHOS_LOG(Error, "instances", "{}: checkpoint failed, instance ended ({}): {}", who, how, cpu.status().message());
    }
    answer(cpu.status().WithContext("checkpoint " + who + ": keep its CPU state"));
    return !lost;
  }
  FaultPoint("checkpoint-cpu-kept");  // the template parked, the GPU state not captured yet
  // The GPU side at the same point: every call the instance sent has run by then (Session::Capture).
  Result<uint64_t> version = options_.sessions->Capture(report.token, name);
  if (!version.ok() && version.status().code() != StatusCode::kNotFound) {
    options_.cpu_state->Release(*cpu).IgnoreError();
    answer(version.status().WithContext("checkpoint " + who + ": capture its GPU state"));
    return true;
  }
  // NotFound: the instance never made a CUDA call; its CPU state is all there is.
  out.version = version.ok() ? *version : 0;
  FaultPoint("checkpoint-captured");  // the snapshot committed, the instance range not switched yet
  Slot replaced;
  bool switched = false;
  CpuStateRef unused = *cpu;  // the template no longer restored from
  {
    std::lock_guard lock(mu_);
    if (!f->removed && !stopping_) {
      for (Slot& slot : f->slots) {
        if (slot.holder != inst.id) continue;
        replaced = slot;
        // The deploy's template stays parked with the range (Slot::deployed); an earlier
        // checkpoint's goes.
        if (slot.deployed.id.empty()) {
          slot.deployed = slot.cpu;
          unused = {};
        } else {
          unused = slot.cpu;
        }
        slot.version = out.version;
        slot.cpu = *cpu;
        switched = true;
      }
    }
  }
  if (!unused.id.empty()) options_.cpu_state->Release(unused).IgnoreError();
  std::vector<uint64_t> versions;
  bool removed = false;
  {
    std::lock_guard lock(mu_);
    versions = VersionsLocked(*f);
    removed = f->removed;
  }
  // The snapshot this range held before (or a checkpoint nobody took) is deleted; a removed
  // function's snapshots go with its ranges.
  if (!removed) options_.sessions->RetainOnly(name, versions);
  if (!switched) {
    answer(Status::Unavailable(fmt::format("checkpoint {}: the function was removed or phosd is stopping", who)));
    return true;
  }
  PHOS_LOG(Info, "instances", "{} checkpointed ({}): v{} and {} replace v{} and {}", who,
           CheckpointModeName(job.mode), out.version, cpu->id, replaced.version, replaced.cpu.id);
  answer(Status::Ok());
  return true;
}

}  // namespace phos::runtime
