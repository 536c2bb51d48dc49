// Checkpoints of running instances (docs/design.md D10): an instance's CPU state kept as a new
// template and its GPU session captured as a new snapshot version, at one point between two of
// its requests; the instance range it holds then restores from there.
#include <fmt/core.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "instance_manager_impl.h"
#include "phos/base/fault_point.h"
#include "phos/base/log.h"

namespace phos::runtime {
namespace {

// The nice value of a soft checkpoint's copying thread.
constexpr int kCaptureNice = 10;

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
  auto it = functions_.find(ServingKeyLocked(name));
  if (it == functions_.end()) return Status::NotFound("no function '" + name + "'");
  std::vector<InstanceStatus> out;
  const Function& f = *it->second;
  for (const auto& inst : f.instances) {
    out.push_back({.id = inst->id, .state = StateName(*inst), .pid = inst->pid, .mode = inst->mode,
                   .restored = inst->restored, .device = DeviceOfLocked(f, *inst)});
  }
  return out;
}

void InstanceManager::Impl::Checkpoint(const std::string& name, uint64_t instance, CheckpointMode mode,
                                       std::function<void(CheckpointOutcome)> done) {
  PendingCheckpoint job;
  job.mode = mode;
  job.done = std::move(done);
  Status queued = QueueCheckpoint(name, instance, job);
  if (queued.ok()) return;
  CheckpointOutcome o;
  o.status = std::move(queued);
  o.instance = instance;
  o.mode = mode;
  job.done(std::move(o));
}

void InstanceManager::Impl::Migrate(const std::string& name, uint64_t instance, MigrationTarget target,
                                    std::function<void(MigrationOutcome)> done) {
  auto move = std::make_shared<Move>();
  move->to = target.node != nullptr ? -1 : target.device;
  move->node = std::move(target.node);
  move->done = std::move(done);
  move->start = Clock::now();
  PendingCheckpoint job;
  job.mode = CheckpointMode::kSoftRecopy;
  job.move = move;
  // A checkpoint that failed fails the migration (the instance serves on where it is); one that
  // succeeded is kept for the migration's answer, once the instance is ready on `device`
  // (AnswerMove).
  job.done = [move](CheckpointOutcome o) {
    if (o.status.ok()) {
      move->checkpoint = std::move(o);
      move->checkpointed = true;
      return;
    }
    MigrationOutcome failed;
    failed.status = o.status.WithContext(move->node != nullptr ? "move to " + move->node->Name()
                                                               : fmt::format("move to device {}", move->to));
    failed.instance = o.instance;
    failed.from = move->from;
    failed.to = move->to;
    failed.copies = o.copies;
    failed.total = o.total;
    move->done(std::move(failed));
  };
  Status queued = QueueCheckpoint(name, instance, job);
  if (queued.ok()) return;
  MigrationOutcome o;
  o.status = std::move(queued);
  o.instance = instance;
  o.from = move->from;
  o.to = move->to;
  if (move->node != nullptr) o.node = move->node->Name();
  move->done(std::move(o));
}

Status InstanceManager::Impl::QueueCheckpoint(const std::string& name, uint64_t instance, PendingCheckpoint& job) {
  std::lock_guard lock(mu_);
  if (stopping_) return Status::FailedPrecondition("phosd is shutting down");
  auto it = functions_.find(ServingKeyLocked(name));
  if (it == functions_.end()) return Status::NotFound("no function '" + name + "'");
  Function& f = *it->second;
  if (f.deploy != DeployState::kDeployed || !SnapshotsEnabled()) {
    return Status::FailedPrecondition(fmt::format(
        "'{}' is not deployed from a snapshot: its instances are spawned, and a checkpoint has no instance range to "
        "restore from",
        name));
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
    return Status::NotFound(instance != 0 ? fmt::format("'{}' has no running instance {}", name, instance)
                                          : fmt::format("'{}' has no running instance", name));
  }
  if (target->moving != nullptr ||
      (job.move != nullptr &&
       std::any_of(target->checkpoints.begin(), target->checkpoints.end(), [](const PendingCheckpoint& p) {
         return p.move != nullptr;
       }))) {
    return Status::FailedPrecondition(fmt::format("instance {} of '{}' is being moved", target->id, name));
  }
  if (target->checkpointing) {
    return Status::FailedPrecondition(
        fmt::format("instance {} of '{}' is still copying its previous checkpoint", target->id, name));
  }
  if (job.move != nullptr) {
    Move& move = *job.move;
    move.from = DeviceOfLocked(f, *target);
    const int held = HeldSlotLocked(f, *target);
    if (held < 0 || f.slots[held].version == 0) {
      return Status::FailedPrecondition(fmt::format(
          "instance {} of '{}' holds no GPU state from a snapshot: there is nothing to move", target->id, name));
    }
    if (move.node != nullptr) {
      if (f.spec.name != f.name) {
        // The other node knows the function by its name; its snapshots here are the version's.
        return Status::FailedPrecondition(fmt::format(
            "'{}' serves version {}, deployed over an earlier one: only a function's first deploy moves between "
            "nodes",
            f.name, f.number));
      }
      if (f.spec.job.checkpoint_every > 0) {
        return Status::FailedPrecondition(fmt::format(
            "'{}' is a job: its driver and kept checkpoints stay on this node; jobs do not move between nodes", name));
      }
      // The function follows its instance: others would serve on here from their own state.
      for (const auto& other : f.instances) {
        if (other != target && !other->retiring) {
          return Status::FailedPrecondition(fmt::format(
              "'{}' runs more than one instance here ({} and {}): only a function's one instance moves to another "
              "node, since the function follows it there",
              name, target->id, other->id));
        }
      }
      if (f.moved_to != nullptr) {
        return Status::FailedPrecondition(fmt::format("'{}' moved to {} already", name, f.moved_to->Name()));
      }
      target->checkpoints.push_back(std::move(job));
      f.cv.notify_all();
      return Status::Ok();
    }
    if (f.spec.gpus != 1) {
      return Status::FailedPrecondition(
          fmt::format("'{}' runs on {} GPUs: a device group's instance moves to another node, not between devices",
                      name, f.spec.gpus));
    }
    const int devices = options_.sessions->DeviceCount();
    if (move.to < 0 || move.to >= devices) {
      return Status::InvalidArgument(fmt::format("device {} is not one of this node's {} devices", move.to, devices));
    }
    if (move.to == move.from) {
      return Status::InvalidArgument(fmt::format("instance {} of '{}' already runs on device {}", target->id, name, move.to));
    }
  }
  target->checkpoints.push_back(std::move(job));
  f.cv.notify_all();  // the instance's serve loop waits there when idle
  return Status::Ok();
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

bool InstanceManager::Impl::CheckpointAfter(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst,
                                            const InstanceProcess& proc, const StartReport& report,
                                            std::optional<PendingCheckpoint> then, bool keep) {
  if (!then) return keep;
  if (keep) return RunCheckpoint(f, inst, proc, report, std::move(*then));
  CheckpointOutcome o;
  o.status = Status::Unavailable("the instance ended before it was checkpointed");
  o.instance = inst->id;
  o.mode = then->mode;
  then->done(std::move(o));
  return false;
}

bool InstanceManager::Impl::RunCheckpoint(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& holder,
                                          const InstanceProcess& proc, const StartReport& report,
                                          PendingCheckpoint job) {
  if (job.final_stop != nullptr) return RunFinalStop(*holder, proc, *job.final_stop);
  const Instance& inst = *holder;
  const std::string& name = f->spec.name;
  const Clock::time_point start = Clock::now();
  const std::string who = fmt::format("instance {} of '{}' (pid {})", inst.id, name, proc.pid);
  auto refuse = [&](Status why) {
    CheckpointOutcome out;
    out.instance = inst.id;
    out.mode = job.mode;
    out.status = std::move(why);
    out.stall = out.total = Since(start);
    job.done(std::move(out));
  };
  int va_slot = -1;
  bool copying = false;
  {
    std::lock_guard lock(mu_);
    if (const int held = HeldSlotLocked(*f, inst); held >= 0) va_slot = f->slots[held].va_slot;
    copying = holder->checkpointing;
  }
  if (copying) {
    refuse(Status::FailedPrecondition(fmt::format("{} is still copying its previous checkpoint", who)));
    return true;
  }
  if (!report.restored || va_slot < 0) {
    // A cold-booted instance's memory is not in its instance range, where restores map a snapshot.
    refuse(Status::FailedPrecondition(fmt::format(
        "{} was brought up {}, not restored from a snapshot: its GPU memory lies outside its instance range; "
        "checkpoint an instance restored from the function's snapshot",
        who, RestoreModeName(report.mode))));
    return true;
  }
  auto capture = std::make_shared<CheckpointCapture>();
  capture->f = f;
  capture->instance = inst.id;
  capture->va_slot = va_slot;
  capture->token = report.token;
  capture->who = who;
  capture->start = start;
  capture->job = std::move(job);
  const CheckpointMode mode = capture->job.mode;
  if (mode != CheckpointMode::kSoftRecopy) {
    // The CPU side first: the instance is idle in its serve loop, where it forks; the fork keeps
    // its state as it is now, and the instance sends nothing until its next request. (A recopy's
    // is kept at its final stop.)
    Result<CpuStateRef> cpu = options_.cpu_state->CaptureRunning({proc.pid, proc.channel_fd, proc.log_path});
    if (!cpu.ok()) {
      const bool lost = cpu.status().code() == StatusCode::kUnavailable;
      if (lost) {
        std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
        PHOS_LOG(Error, "instances", "{}: checkpoint failed, instance ended ({}): {}", who, how, cpu.status().message());
      }
      job = std::move(capture->job);
      refuse(cpu.status().WithContext("checkpoint " + who + ": keep its CPU state"));
      return !lost;
    }
    capture->cpu = *cpu;
    FaultPoint("checkpoint-cpu-kept");  // the template parked, the GPU state not captured yet
  }
  if (mode == CheckpointMode::kStopTheWorld) {
    // The GPU side at the same point: every call the instance sent has run by then
    // (Session::Capture), and the instance serves nothing until the snapshot is committed.
    CaptureOptions options;
    options.keep_hot = capture->f->spec.job.checkpoint_every == 0;  // a job's: read only on its resume
    FinishCheckpoint(capture, options_.sessions->Capture(report.token, name, options));
    return true;
  }
  // Soft modes: the buffers are copied on a thread of the checkpoint's own, and the instance serves
  // on from the capture's point (a recopy stops it once more at the end: RunFinalStop).
  auto owner = std::make_shared<Instance>();  // the thread's, joined like a deploy's
  std::unique_lock owner_lock(mu_);  // Shutdown joins what live_ holds: the thread is set first
  owner->id = ++next_instance_id_;
  live_.push_back(owner);
  holder->checkpointing = true;
  owner->thread = std::thread([this, capture, owner, holder, mode] {
    // The copies' host side (hashing, writing the store) gives way to the instance's own work, as
    // their device side does on its stream of the lowest priority.
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kCaptureNice) != 0) {
      PHOS_LOG(Debug, "instances", "checkpoint thread keeps its priority: {}", std::strerror(errno));
    }
    CaptureOptions options;
    options.mode = mode;
    options.keep_hot = capture->f->spec.job.checkpoint_every == 0;
    options.stats = &capture->copies;  // written once the capture returns, read after
    options.at_point = [capture] {
      std::lock_guard lock(capture->mu);
      capture->at_point = Clock::now();
      capture->cv.notify_all();
    };
    if (mode == CheckpointMode::kSoftRecopy) {
      options.final_stop = [this, capture, holder] {
        FaultPoint("checkpoint-precopied");  // every buffer copied into the store, nothing committed
        return AwaitFinalStop(capture, holder);
      };
      options.resumed = [capture] {
        std::lock_guard lock(capture->mu);
        capture->resumed = Clock::now();
        capture->cv.notify_all();
      };
    }
    auto finish = [this, capture](const Result<uint64_t>& version) {
      FinishCheckpoint(capture, version);
      std::lock_guard lock(capture->mu);
      capture->finished = true;
      capture->cv.notify_all();
    };
    if (capture->job.move != nullptr) {
      // A migration's final stop waits for the commit only, not for what the capture does after it.
      options.committed = [capture, finish](uint64_t version, const CaptureStats& copies) {
        capture->copies = copies;
        finish(version);
      };
      options.session_ends = true;
    }
    Result<uint64_t> version = options_.sessions->Capture(capture->token, capture->f->spec.name, options);
    bool finished = false;
    {
      std::lock_guard lock(capture->mu);
      capture->returned = true;
      finished = capture->finished;
      capture->cv.notify_all();
    }
    if (!finished) finish(version);
    std::lock_guard lock(mu_);
    holder->checkpointing = false;
    finished_.push_back(owner);
    supervisor_cv_.notify_all();
  });
  owner_lock.unlock();
  std::unique_lock lock(capture->mu);
  capture->cv.wait(lock, [&] { return capture->at_point != Clock::time_point{} || capture->returned; });
  return true;
}

Status InstanceManager::Impl::AwaitFinalStop(const std::shared_ptr<CheckpointCapture>& capture,
                                             const std::shared_ptr<Instance>& holder) {
  {
    std::lock_guard lock(mu_);
    // An instance ending has failed (or is failing) what was asked of it: the stop would never come.
    if (holder->retiring || stopping_) {
      return Status::Unavailable(fmt::format("{} ended before the checkpoint's final stop", capture->who));
    }
    PendingCheckpoint stop;
    stop.mode = CheckpointMode::kSoftRecopy;
    stop.final_stop = capture;
    stop.done = [capture](CheckpointOutcome ended) {
      std::lock_guard lock(capture->mu);
      capture->stop_status = std::move(ended.status);
      capture->stop_answered = true;
      capture->cv.notify_all();
    };
    // Before queued requests: the stop is what the checkpoint waits for.
    holder->checkpoints.push_front(std::move(stop));
    capture->f->cv.notify_all();
  }
  std::unique_lock lock(capture->mu);
  capture->cv.wait(lock, [&] { return capture->stop_answered; });
  return capture->stop_status;
}

bool InstanceManager::Impl::RunFinalStop(Instance& inst, const InstanceProcess& proc, CheckpointCapture& capture) {
  const Clock::time_point stopped = Clock::now();
  // The CPU side where the GPU side will stand: the instance is idle in its serve loop and sends
  // nothing until its next request, which waits until the final stop is over.
  Result<CpuStateRef> cpu = options_.cpu_state->CaptureRunning({proc.pid, proc.channel_fd, proc.log_path});
  const bool lost = !cpu.ok() && cpu.status().code() == StatusCode::kUnavailable;
  if (lost) {
    std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
    PHOS_LOG(Error, "instances", "{}: checkpoint failed, instance ended ({}): {}", capture.who, how,
             cpu.status().message());
  }
  PHOS_LOG(Debug, "instances", "{}: final stop: CPU state kept in {:.1f} ms", capture.who,
           std::chrono::duration<double, std::milli>(Clock::now() - stopped).count());
  std::unique_lock lock(capture.mu);
  capture.stopped = stopped;
  if (cpu.ok()) {
    capture.cpu = *cpu;
  } else {
    capture.stop_status = cpu.status().WithContext("checkpoint " + capture.who + ": keep its CPU state");
  }
  capture.stop_answered = true;
  capture.cv.notify_all();
  if (!cpu.ok()) return !lost;
  FaultPoint("checkpoint-cpu-kept");
  const std::shared_ptr<Move> move = capture.job.move;
  if (move == nullptr) {
    capture.cv.wait(lock, [&] { return capture.resumed != Clock::time_point{} || capture.returned; });
    return true;
  }
  // A migration: the instance serves nothing more here. Once the checkpoint is committed and its
  // range switched to the target device, the process ends, and the instance's thread restores
  // the range there (RunInstance); a checkpoint that failed leaves it serving where it is.
  capture.cv.wait(lock, [&] { return capture.finished; });
  lock.unlock();
  if (!move->checkpointed) return true;  // the checkpoint failed, and answered the migration so
  move->stopped = stopped;
  move->committed = Clock::now();
  // The process's end closes its session's control socket, and the API server may end the session
  // before this instance's thread does: either way the range must not be zeroed on the move's path.
  if (options_.sessions != nullptr && !capture.token.empty()) options_.sessions->MarkMoving(capture.token);
  shutdown(proc.channel_fd, SHUT_RDWR);
  std::string how = EndInstanceProcess(proc.pid, std::chrono::milliseconds(0));
  PHOS_LOG(Info, "instances", "{}: moving to {}: the process on device {} ended ({})", capture.who,
           move->node != nullptr ? move->node->Name() : fmt::format("device {}", move->to), move->from, how);
  std::lock_guard manager(mu_);
  inst.moving = move;
  return false;
}

void InstanceManager::Impl::AnswerMove(Instance& inst, Status status) {
  std::shared_ptr<Move> move;
  {
    std::lock_guard lock(mu_);
    move.swap(inst.moving);
  }
  if (move == nullptr) return;
  MigrationOutcome o;
  // A move to a node whose send failed is answered with why, once the instance serves on here.
  o.status = status.ok() && !move->failure.ok() ? move->failure : std::move(status);
  o.instance = inst.id;
  o.from = move->from;
  o.to = move->to;
  if (move->node != nullptr) o.node = move->node->Name();
  o.node_instance = move->received.instance;
  o.node_version = move->received.version;
  o.sent_chunks = move->received.sent_chunks;
  o.sent_bytes = move->received.sent_bytes;
  o.version = move->checkpoint.version;
  o.copies = move->checkpoint.copies;
  const Clock::time_point now = Clock::now();
  auto between = [](Clock::time_point a, Clock::time_point b) {
    return a == Clock::time_point{} || b == Clock::time_point{} ? std::chrono::microseconds(0)
                                                                : std::chrono::duration_cast<std::chrono::microseconds>(b - a);
  };
  o.downtime = between(move->stopped, now);
  o.committing = between(move->stopped, move->committed);
  o.releasing = between(move->committed, move->released);
  o.restoring = between(move->released, now);
  o.total = std::chrono::duration_cast<std::chrono::microseconds>(now - move->start);
  move->done(std::move(o));
}

void InstanceManager::Impl::FinishCheckpoint(const std::shared_ptr<CheckpointCapture>& capture,
                                             const Result<uint64_t>& version) {
  const std::shared_ptr<Function>& f = capture->f;
  const std::string& name = f->spec.name;
  CheckpointOutcome out;
  out.instance = capture->instance;
  out.mode = capture->job.mode;
  out.copies = capture->copies;
  {
    std::lock_guard lock(capture->mu);
    // Until the point, or the end for a stop-the-world capture, and a recopy's final stop: what
    // the instance waited for.
    const Clock::time_point resumed =
        capture->at_point != Clock::time_point{} && out.mode != CheckpointMode::kStopTheWorld ? capture->at_point
                                                                                               : Clock::now();
    out.stall = std::chrono::duration_cast<std::chrono::microseconds>(resumed - capture->start);
    if (capture->stopped != Clock::time_point{}) {
      const Clock::time_point over = capture->resumed != Clock::time_point{} ? capture->resumed : Clock::now();
      out.stall += std::chrono::duration_cast<std::chrono::microseconds>(over - capture->stopped);
    }
  }
  auto answer = [&](Status status) {
    out.status = std::move(status);
    out.total = Since(capture->start);
    capture->job.done(std::move(out));
  };
  if (!version.ok() && version.status().code() != StatusCode::kNotFound) {
    if (!capture->cpu.id.empty()) options_.cpu_state->Release(capture->cpu).IgnoreError();
    answer(version.status().WithContext("checkpoint " + capture->who + ": capture its GPU state"));
    return;
  }
  // NotFound: the instance has no GPU session: it made no CUDA call since it was restored, so its
  // GPU state is still the snapshot its range holds (0: the function has none), kept as it is.
  const bool gpu_unchanged = !version.ok();
  out.version = version.ok() ? *version : 0;
  FaultPoint("checkpoint-captured");  // the snapshot committed, the instance range not switched yet
  // The range the instance was restored in, even if the instance ended meanwhile: its next restore
  // starts from the checkpoint.
  Slot replaced;
  bool switched = false;
  CpuStateRef unused = capture->cpu;  // the template no longer restored from
  {
    std::lock_guard lock(mu_);
    if (!f->removed && !stopping_) {
      for (Slot& slot : f->slots) {
        if (slot.va_slot != capture->va_slot) continue;
        replaced = slot;
        if (gpu_unchanged) out.version = slot.version;
        unused = AdoptCheckpoint(slot, out.version, capture->cpu);
        // Restored there from now on (a move to another node restores here only if its send fails).
        if (capture->job.move != nullptr && capture->job.move->node == nullptr) slot.device = capture->job.move->to;
        switched = true;
      }
    }
  }
  if (!unused.id.empty()) options_.cpu_state->Release(unused).IgnoreError();
  if (switched) {
    PHOS_LOG(Info, "instances", "{} checkpointed ({}): v{} and {} replace v{} and {}", capture->who,
             CheckpointModeName(out.mode), out.version, capture->cpu.id, replaced.version, replaced.cpu.id);
    answer(Status::Ok());
    // A migration's final stop goes on from here: the deletion below is not its downtime.
    std::lock_guard lock(capture->mu);
    capture->finished = true;
    capture->cv.notify_all();
  }
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
    answer(Status::Unavailable(fmt::format("checkpoint {}: the function was removed or phosd is stopping", capture->who)));
  }
}

}  // namespace phos::runtime
