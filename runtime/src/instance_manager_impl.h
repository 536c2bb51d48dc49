// The instance manager's state and threads (private). One thread per instance runs its whole
// life: make the process (spawn, or fork from the function's template and restore its snapshot),
// wait for ready, serve invocations, end. One thread per deploy runs the function to its entry
// point and captures it. A supervisor thread tops functions up to their warm count, expires queued
// invocations, retries failed deploys and joins finished threads. One mutex guards all manager
// state; channel I/O and callbacks run outside it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "instance_metrics.h"
#include "instance_process.h"
#include "phos/runtime/instance_manager.h"

namespace phos::runtime {

using Clock = std::chrono::steady_clock;

enum class InstanceState { kStarting, kIdle, kBusy };

struct Function;
struct CheckpointCapture;

// A migration under way (InstanceManager::Migrate): a soft recopy whose final stop ends the
// instance's process; the instance's thread then restores its range on `to` (or sends it to
// `node`) and answers once the new process is ready. The receiving side of a move from another
// node (AdoptSnapshot) is one too: its instance answers `done` once ready.
struct Move {
  int from = 0;
  int to = 0;
  // Set for a move to another node: the instance ends here once the checkpoint is restored there.
  std::shared_ptr<PeerNode> node;
  // What the move did there, and why the instance serves on here instead (the send failed: it was
  // restored here from the checkpoint, and the move is answered with this).
  PeerNode::Received received;
  Status failure;
  std::function<void(MigrationOutcome)> done;
  Clock::time_point start;
  CheckpointOutcome checkpoint;  // the recopy's, once answered Ok
  bool checkpointed = false;     // it was
  Clock::time_point stopped{};   // the final stop began
  Clock::time_point committed{};  // the checkpoint committed (the process ends next)
  Clock::time_point released{};   // the session on `from` ended
};

// A checkpoint asked of an instance (InstanceManager::Checkpoint), taken when it is next idle; or
// the final stop of a soft recopy under way (`final_stop`), whose `done` is told only when the
// instance ends first. `move`: the checkpoint is a migration's.
struct PendingCheckpoint {
  CheckpointMode mode = CheckpointMode::kStopTheWorld;
  std::function<void(CheckpointOutcome)> done;
  std::shared_ptr<CheckpointCapture> final_stop;
  std::shared_ptr<Move> move;
};

struct Invocation {
  std::string request;
  Clock::time_point deadline;
  std::function<void(InvokeOutcome)> done;
  Clock::time_point arrived;
  RestoreMode mode = RestoreMode::kAuto;
  PieceCallback on_piece;  // may be empty: pieces are gathered into the body
  // Taken by the instance that served it right after (a job's checkpoint after a step), before
  // anything else; failed when that instance ends instead. Unset: none.
  std::optional<PendingCheckpoint> then;
  std::string request_id;  // InvokeCall::request_id
};

// A checkpoint a job kept (instance_jobs.cc): its snapshot version, and the step it was taken at.
struct JobCheckpoint {
  uint64_t version = 0;
  int64_t step = 0;
};

// A checkpoint under way: its CPU state kept, its GPU state being captured (instance_checkpoint.cc).
struct CheckpointCapture {
  std::shared_ptr<Function> f;
  uint64_t instance = 0;
  int va_slot = -1;  // the instance range the checkpoint belongs to
  CpuStateRef cpu;   // the new template
  std::string token;  // the instance's GPU session
  std::string who;    // for messages
  std::chrono::steady_clock::time_point start;
  PendingCheckpoint job;
  std::mutex mu;
  std::condition_variable cv;
  std::chrono::steady_clock::time_point at_point{};  // the capture's point taken: the instance runs on
  CaptureStats copies;                               // what a soft capture copied ahead of calls
  bool returned = false;                             // the capture returned (failed before its point, or done)
  bool finished = false;                             // and the checkpoint was answered (FinishCheckpoint)
  // A soft recopy's final stop: taken by the instance (its CPU state kept, or why not: the answer),
  // and over (the instance may serve again).
  bool stop_answered = false;
  Status stop_status;
  std::chrono::steady_clock::time_point stopped{};
  std::chrono::steady_clock::time_point resumed{};
};

struct Instance {
  uint64_t id = 0;
  InstanceState state = InstanceState::kStarting;
  bool extra = false;  // beyond the warm count: ends after keep_alive idle
  bool evict = false;  // asked to end once idle: a restore needs its place
  // Ending (evicted, idle past its keep-alive, failed, or going away): it serves nothing more and
  // no longer counts against max_instances, though it holds its instance range until scrubbed.
  bool retiring = false;
  bool for_request = false;  // being restored for an invocation that waits for it
  bool holds_range = false;  // has taken one of the function's instance ranges
  Clock::time_point retired_at{};  // when it started retiring
  // Set once its process is made: how, and whether its GPU state came from a snapshot.
  pid_t pid = -1;
  RestoreMode mode = RestoreMode::kWarm;
  bool restored = false;
  // Checkpoints asked of it, taken before the next queued invocation; failed if it ends first.
  std::deque<PendingCheckpoint> checkpoints;
  // A soft checkpoint of it is still copying (it serves meanwhile): another is refused until then.
  bool checkpointing = false;
  // Its migration's final stop ended its process: its thread restores it on the target device.
  // For an instance restored by AdoptSnapshot: the move it completes, answered once it is ready.
  std::shared_ptr<Move> moving;
  // The index in Function::slots of the instance range it must take (AdoptSnapshot's); -1: any.
  int wanted_slot = -1;
  std::thread thread;
};

// One deployed instance range of a function: its snapshot there and the parked process it was
// captured from. Only one instance can use it at a time (the memory must be at the snapshot's
// addresses), so a function has one per instance it may run at once, and a spare
// (InstanceRanges): an ending instance scrubs its range while a restore uses the spare.
struct Slot {
  int va_slot = -1;      // the API server's instance range
  uint64_t version = 0;  // the GPU snapshot; 0: the function holds no GPU state
  CpuStateRef cpu;
  // Once a checkpoint's template is `cpu`: the deploy's, still parked. In a sandbox the deploy's
  // process is the first of its PID namespace, whose end would end every process forked in it
  // (instances, checkpoints' templates), so it lives as long as the range.
  CpuStateRef deployed;
  uint64_t holder = 0;   // the instance living in it; 0: free
  int device = -1;       // the node's device its restores run on (a migration's target); -1: the API server's
  // The instance AdoptSnapshot started for this range: no other restore takes it meanwhile; 0: none.
  uint64_t reserved_for = 0;
};

enum class DeployState {
  kNone,       // not deployed (no snapshot support): instances are spawned
  kDeploying,  // running to its entry point / being captured
  kDeployed,   // a template (and, with GPU state, a snapshot) to restore instances from
  kFailed,     // the last deploy failed: retried after a backoff
};

// A function's versions run as Functions of their own (docs/design.md D18): each deploy of its
// name gets a key, the name itself for the first and "<name>@<n>" after, under which its
// instances, snapshots, cgroup and logs live.
std::string VersionKey(const std::string& name, uint64_t serial);
// The SHA-256 of the file at `path` (lowercase hex); empty when it cannot be read.
std::string FileSha256Hex(const std::string& path);
// Now, in ms of Unix time.
int64_t UnixMillis();

struct Function {
  FunctionSpec spec;  // spec.name is the version's key (VersionKey)
  std::string name;   // the function's
  // Which version it is (FunctionVersion): its number, its executable's digest, when it was deployed.
  uint64_t number = 1;
  std::string executable_sha256;  // taken by its deploy (RunDeploy)
  int64_t deployed_at_ms = 0;  // NewStampLocked, or the adopted record's
  // A rollback's: the digest its executable must still have (ExecutableChanged); empty: any.
  std::string expected_sha256;
  // Deploying to replace the version serving its name (DeployVersion, Rollback): it takes the
  // name once deployed (SwapInLocked).
  bool replacing = false;
  // Replaced by another version: it serves no more (removed), and its snapshots and cgroup go
  // once its last instance has ended (DropVersionResources).
  bool replaced = false;
  bool removed = false;
  std::deque<Invocation> queue;
  std::condition_variable cv;  // queue non-empty, removed, or stopping
  std::vector<std::shared_ptr<Instance>> instances;
  Clock::time_point next_start{};
  int start_failures = 0;
  DeployState deploy = DeployState::kNone;
  // What a deploy under way is doing ("running to its entry point", ...; FunctionStatus); empty
  // otherwise.
  std::string deploy_stage;
  std::vector<Slot> slots;         // deployed: InstanceRanges(spec) of them
  std::condition_variable slot_cv;  // a slot became free, removed, or stopping
  int slot_waiters = 0;             // restores waiting for a slot: warm top-ups wait for them
  bool learning = false;           // an instance is learning the first-touch order
  // Called once the deploy in progress ends (Deploy()).
  std::vector<std::function<void(DeployOutcome)>> deployed_callbacks;
  // A job's (spec.job, instance_jobs.cc): the checkpoints it keeps, oldest first (their versions
  // are kept in the store beside the instance range's), the last step it answered, and the
  // instance range its checkpoints belong to (-1: none yet), claimed before its deploy after a
  // restart.
  std::deque<JobCheckpoint> job_checkpoints;
  int64_t job_step = 0;
  int job_va_slot = -1;
  bool job_va_slot_claimed = false;  // claimed by LoadJobLocked, not yet a deployed slot's
  bool job_driven = false;           // its driver thread runs
  // Its instance moved to this node (Migrate to a node): every invocation is forwarded there.
  std::shared_ptr<PeerNode> moved_to;
  // Invocations forwarded there and not answered yet: at most spec.max_queue (when set), as if they
  // waited here. Shared with the answers' callbacks, which may outlive the manager.
  std::shared_ptr<std::atomic<int>> forwarding = std::make_shared<std::atomic<int>>(0);
  // Another node's version this deploy adopts (Adopt); null: a deploy of this node's own.
  std::shared_ptr<const AdoptedVersion> adopted;
  // A deploy asked for on this node (Register, Deploy, DeployVersion, Rollback), told to
  // InstanceManagerOptions::on_deployed once it serves; not a restart's deploy again, nor an
  // adoption.
  bool announce = false;
};

// What the first invocation of a new instance reports about how it was brought up.
struct StartReport {
  RestoreMode mode = RestoreMode::kWarm;
  std::string token;
  Clock::time_point ready;
  bool restored = false;  // GPU state from a snapshot
  Clock::duration range_wait{};  // waited for a free instance range
  // A warm top-up found no room (a restore for a request took it): it gave way, which is no failure.
  bool gave_way = false;
};

// A function's versions (instance_versions.cc), by its name.
struct VersionTable {
  std::string serving;    // the key of the Function serving the name
  std::string deploying;  // the key of one deploying to replace it; empty: none
  uint64_t last = 1;      // the highest version number given out
  uint64_t serial = 1;    // the last key's (VersionKey)
  std::deque<FunctionVersion> kept;  // earlier versions to roll back to, oldest first
  int64_t registered_at_ms = 0;      // VersionStatus::registered_at_ms (NewStampLocked)
};

// What taking a Function down leaves to do outside the lock (FinishTakeDown).
struct TakeDown {
  std::shared_ptr<Function> f;
  std::deque<Invocation> orphans;
  std::vector<std::function<void(DeployOutcome)>> deploys;
  std::vector<Slot> free_slots;  // slots with an instance are released when it ends
  // The node a moved function forwards to: its end waits for the forwards under way.
  std::shared_ptr<PeerNode> moved_to;
};

class InstanceManager::Impl {
 public:
  explicit Impl(InstanceManagerOptions options)
      : options_(std::move(options)), metrics_(options_.metrics_registry) {}
  ~Impl();

  Status Open();
  Status Register(const FunctionSpec& spec);
  // ValidateFunctionSpec, and a GPU count the node has (with GPU sessions).
  Status Validate(const FunctionSpec& spec) const;
  void Deploy(const FunctionSpec& spec, std::string sample_request, std::chrono::milliseconds sample_timeout,
              std::function<void(DeployOutcome)> done);
  // With `held`, only while the name is what it names (HeldLocked).
  Status Remove(const std::string& name, const HeldFunction* held = nullptr);
  // ---- versions (instance_versions.cc) ----
  void DeployVersion(FunctionSpec spec, std::string sample_request, std::chrono::milliseconds sample_timeout,
                     std::function<void(DeployOutcome)> done);
  void Rollback(const std::string& name, uint64_t version, std::function<void(DeployOutcome)> done);
  void Adopt(AdoptedVersion adopted, std::function<void(DeployOutcome)> done);
  Result<std::vector<VersionStatus>> Versions(const std::string& name) const;
  Status DeleteVersion(const std::string& name, uint64_t version);
  // NotFound for a version's key ("<name>@<n>"): it names nothing from outside.
  static Status CheckName(const std::string& name);
  // The key of the version serving `name`; `name` itself when it is no function's name (a
  // version's key, from inside, or nothing: the caller's lookup says so). The caller holds mu_.
  const std::string& ServingKeyLocked(const std::string& name) const {
    auto v = versions_.find(name);
    return v != versions_.end() ? v->second.serving : name;
  }
  std::vector<FunctionStatus> List() const;
  std::optional<FunctionSpec> Spec(const std::string& name) const;
  void Invoke(const std::string& name, InvokeCall call, std::function<void(InvokeOutcome)> done);
  // Invoke's queueing of a made invocation (a request's, or a job's step); a deadline left at
  // its epoch is given the function's default.
  void Submit(const std::string& name, Invocation inv);
  Result<JobStatus> Job(const std::string& name) const;
  Result<std::vector<std::string>> LogFiles(const std::string& name) const;
  void Shutdown();
  Result<std::vector<InstanceStatus>> Instances(const std::string& name) const;
  void Checkpoint(const std::string& name, uint64_t instance, CheckpointMode mode,
                  std::function<void(CheckpointOutcome)> done);
  void Migrate(const std::string& name, uint64_t instance, MigrationTarget target,
               std::function<void(MigrationOutcome)> done);
  void AdoptSnapshot(const std::string& name, int va_slot, uint64_t version, std::function<void(MigrationOutcome)> done);

 private:
  bool SnapshotsEnabled() const {
    return options_.cpu_state != nullptr && options_.sessions != nullptr && options_.sessions->SupportsSnapshots();
  }
  // PHOS_GPU_SOCKET of function processes: where a sandboxed one finds gpu.sock.
  std::string GpuSocketForFunctions() const {
    const std::string host = options_.sessions->SocketPath();
    return options_.sandbox != nullptr ? options_.sandbox->SocketPathForFunctions(host) : host;
  }
  // The session variables of a function process whose session is `token`'s.
  ipc::invoke::EnvList SessionEnv(const std::string& token) const {
    return {{"PHOS_GPU_SOCKET", GpuSocketForFunctions()}, {"PHOS_INSTANCE_TOKEN", token}};
  }
  // What a function process started from its executable is given beyond its spec's variables:
  // `session`'s, and LD_LIBRARY_PATH with function_library_dir first (then the spec's value, else
  // phosd's own).
  ipc::invoke::EnvList ProcessEnv(const FunctionSpec& spec, ipc::invoke::EnvList session) const;
  // Adds `version` (its spec's name the function's) as a Function under `key` (not persisted);
  // the caller holds mu_.
  std::shared_ptr<Function> AddVersionLocked(FunctionVersion version, const std::string& key);
  // A new function (not persisted): its first version, serving its name.
  std::shared_ptr<Function> AddFunctionLocked(const FunctionSpec& spec);
  // The time of a registration (VersionStatus::registered_at_ms) or of a deploy made here
  // (FunctionVersion::deployed_at_ms): now, or one past the last given out (loaded or made) when
  // the clock has not moved past it. Each identifies what it stamps (a removal from the cluster
  // compares them), so no two are equal: a name removed and registered afresh, or rolled back to a
  // version, within a millisecond is told apart. The caller holds mu_.
  int64_t NewStampLocked();
  // Ok when the name of `table` is what `held` names (InstanceManager::RemoveIfHeld), else
  // FailedPrecondition saying what it is. The caller holds mu_.
  Status HeldLocked(const std::string& name, const VersionTable& table, const HeldFunction& held) const;
  // Undoes AddLocked for a function whose registration or deploy failed (the registry entry and
  // its sessions' limits; a version deploying to replace another is just forgotten).
  void ForgetLocked(const std::string& key);
  // Takes `f` out of service: marked removed, its queue, deploy callbacks and free slots taken
  // (the caller has already erased it from functions_).
  TakeDown TakeDownLocked(const std::shared_ptr<Function>& f);
  // The rest, outside the lock: queued invocations and deploys answered with `why`, free ranges
  // released, and (`drop`) the function's snapshots and cgroup.
  void FinishTakeDown(TakeDown& down, const std::string& why, bool drop);
  // A version's snapshots and cgroup, once nothing of it runs: unless its key serves again.
  void DropVersionResources(const std::string& key);
  // The deployed `f` (Function::replacing) takes its name: the queued invocations move to it, the
  // version it replaces is taken down (its instances end once idle) and kept to roll back to.
  // Returns that one's take-down, to finish outside the lock (and whether its resources go now).
  TakeDown SwapInLocked(const std::shared_ptr<Function>& f, bool* drop_now);
  // The record of `f`'s version.
  static FunctionVersion VersionOf(const Function& f);
  // FailedPrecondition, saying so, when `digest` is not what `version`'s executable had.
  static Status ExecutableChanged(const FunctionVersion& version, const std::string& digest);
  // Starts deploying `version` (its spec's name the function's) as the replacement of the version
  // serving its name: DeployVersion's, Rollback's and Adopt's (`adopted`: the other node's
  // version it deploys; null otherwise).
  void DeployReplacement(FunctionVersion version, std::string sample_request, std::chrono::milliseconds sample_timeout,
                         std::function<void(DeployOutcome)> done,
                         std::shared_ptr<const AdoptedVersion> adopted = nullptr);

  // ---- supervisor and capacity (instance_capacity.cc) ----
  void Supervise();
  // What the supervisor should start for `f` now.
  enum class PlannedStart {
    kNothing,
    kLater,     // something, once the restart backoff (next_start) has passed
    kWarm,      // a warm instance (below the warm count)
    kPromote,   // none: max_instances run, so an extra becomes warm
    kForQueue,  // an instance for the first queued invocation (nothing else will take it)
  };
  PlannedStart PlanStartLocked(const Function& f, Clock::time_point now) const;
  bool NeedsStartLocked(Clock::time_point now) const;
  // The instance's invocation is answered (or failed): warm top-ups may restore again.
  void DoneRestoringLocked(Instance& inst);
  std::shared_ptr<Instance> StartInstanceLocked(const std::shared_ptr<Function>& f, RestoreMode mode,
                                                std::optional<Invocation> first, bool extra);
  void JoinFinishedLocked();
  int IdleLocked(const Function& f) const;
  // Instances that count against max_instances: all but the retiring.
  int LiveLocked(const Function& f) const;
  // Non-retiring instances that hold an instance range (those waiting for one do not count).
  int HoldersLocked(const Function& f) const;
  // Non-retiring instances started for invocations (extra) / kept warm.
  int ExtraLocked(const Function& f) const;
  int WarmLocked(const Function& f) const { return LiveLocked(f) - ExtraLocked(f); }
  // Asks an idle instance to end (an extra first, the longest idle): false when none is idle.
  bool EvictIdleLocked(Function& f);
  // Marks `inst` retiring and wakes whoever waits for room (a restore, the supervisor).
  void RetireLocked(Function& f, Instance& inst);
  // The contexts restores may lease at once (the instance ranges free for them, a deploying
  // function's all), told to the sessions when it changes (GpuSessions::SetContextDemand).
  void PublishDemandLocked();

  // ---- one instance's life (instance_manager.cc) ----
  void RunInstance(std::shared_ptr<Function> f, std::shared_ptr<Instance> inst, RestoreMode mode,
                   std::optional<Invocation> first);
  // Whether another version replaced `f` (Function::replaced) while phosd serves on; takes mu_.
  bool WasReplaced(const Function& f) const {
    std::lock_guard lock(mu_);
    return f.replaced && !stopping_;
  }
  // Tells options_.on_event what happened to `inst` of `f`; the caller holds no lock.
  void Emit(InstanceEvent::Kind kind, const Function& f, const Instance& inst) const;
  bool Serve(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst, const FunctionSpec& spec,
             const InstanceProcess& proc, StartReport report, std::optional<Invocation> first, bool learning);
  // Runs one invocation; `before_answer` runs once the instance answered, before the caller is.
  // Sets what the deploy of `f` is doing, for List(); takes mu_.
  void SetDeployStage(Function& f, std::string stage) {
    std::lock_guard lock(mu_);
    f.deploy_stage = std::move(stage);
  }
  // `send_request_id`: the instance's SDK takes request ids (its ready frame said so).
  bool Handle(const InstanceProcess& proc, const std::string& who, Invocation inv, const StartReport* report,
              const std::function<void()>& before_answer, bool send_request_id);
  Status SaveLocked();

  // ---- checkpoints of running instances (instance_checkpoint.cc) ----
  // Takes `job` on the instance's thread while it is held busy: its CPU state kept as a new
  // template, its GPU session captured at the same point, and its instance range switched to
  // both. Returns false when the instance had to be ended (its channel broke).
  bool RunCheckpoint(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst,
                     const InstanceProcess& proc, const StartReport& report, PendingCheckpoint job);
  // A soft recopy's final stop, on the instance's thread at its idle point: its CPU state kept and
  // its GPU state's last copies made before it serves again. Returns as RunCheckpoint does.
  // A migration's ends the process once the checkpoint is committed (Instance::moving).
  bool RunFinalStop(Instance& inst, const InstanceProcess& proc, CheckpointCapture& capture);
  // Answers `inst`'s migration, if one is under way (Instance::moving): Ok once its new process is
  // ready on the target device, else `status`.
  void AnswerMove(Instance& inst, Status status);
  // ---- moves between nodes (instance_nodes.cc) ----
  // On the instance's thread, its process and session ended by a move to another node: the
  // checkpoint sent there and restored; then the function's invocations forwarded there. False
  // when the send failed (Move::failure says why): the instance is restored here instead.
  bool SendToNode(const std::shared_ptr<Function>& f, Instance& inst, Move& move);
  // Forwards `inv` to the node `f` moved to; counted in `forwarding` (the caller has added it)
  // until it is answered.
  void Forward(const std::string& name, const std::shared_ptr<PeerNode>& node,
               std::shared_ptr<std::atomic<int>> forwarding, Invocation inv);
  // Queues checkpoint `job` (moved from) for instance `instance` of `name` (0: an idle one, else
  // the oldest); why not when there is no such instance or it cannot be checkpointed (or moved)
  // now, `job` left as it was.
  Status QueueCheckpoint(const std::string& name, uint64_t instance, PendingCheckpoint& job);
  // The soft recopy's copying thread asks `holder` for its final stop and waits until it is taken:
  // the instance's CPU state kept, or why not.
  Status AwaitFinalStop(const std::shared_ptr<CheckpointCapture>& capture, const std::shared_ptr<Instance>& holder);
  // Switches the checkpoint's instance range to the captured `version` and its template (or
  // releases the template when the capture failed), and answers the checkpoint.
  void FinishCheckpoint(const std::shared_ptr<CheckpointCapture>& capture, const Result<uint64_t>& version);
  // Answers the checkpoints still asked of an instance that ends.
  void FailPendingCheckpoints(Instance& inst, const Status& why);
  // The checkpoint an invocation asked for right after it (Invocation::then), on the instance that
  // served it if it is kept (`keep`, what Handle returned); answered Unavailable otherwise.
  // Returns whether the instance is kept.
  bool CheckpointAfter(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst,
                       const InstanceProcess& proc, const StartReport& report, std::optional<PendingCheckpoint> then,
                       bool keep);

  // ---- long-running jobs (instance_jobs.cc, docs/design.md D10) ----
  // <data-dir>/jobs/<name>: the job's kept checkpoints (checkpoints.json) and the loss of every
  // step it answered (losses.tsv).
  std::string JobDir(const std::string& name) const;
  // A job's checkpoints as a phosd before this one kept them, and the instance range they belong
  // to, claimed now (before any deploy takes it); called by Open.
  void LoadJobLocked(Function& f);
  // Starts the driver thread of a job function: registered now (`fresh`: what an earlier job of
  // its name left is forgotten), or again by Open.
  void StartJobLocked(const std::shared_ptr<Function>& f, bool fresh);
  // The driver: the job's instance runs one step per request, checkpointed every
  // checkpoint_every steps, until `steps` or the function's removal.
  void RunJob(const std::shared_ptr<Function>& f);
  // A checkpoint the job took after `step`: kept, the oldest beyond spec.job.keep dropped (from
  // checkpoints.json, written first, then from the store).
  void KeepJobCheckpoint(const std::shared_ptr<Function>& f, const CheckpointOutcome& o, int64_t step);
  // After a deploy of a job with kept checkpoints: `slot` restores from the newest one whose
  // layout is the deploy's snapshot's (the state on the device, the deploy's process for the CPU).
  void ResumeJobSlot(Function& f, Slot* slot);

  // ---- deploy and restore (instance_deploy.cc) ----
  // Starts the deploy thread of `f` (deploy kDeploying); the caller holds mu_.
  void StartDeployLocked(const std::shared_ptr<Function>& f, std::string sample_request,
                         std::chrono::milliseconds sample_timeout = std::chrono::milliseconds(0));
  void RunDeploy(std::shared_ptr<Function> f, std::shared_ptr<Instance> thread_owner, std::string sample_request,
                 std::chrono::milliseconds sample_timeout);
  // Runs the deploy's sample request on a restored instance (sample_ran, sample, first_touch_learned).
  void RunSample(const std::shared_ptr<Function>& f, std::string request, std::chrono::milliseconds timeout,
                 DeployOutcome* outcome);
  // Runs `f` to its entry point in an instance range of its own and captures it there; with
  // warm-up requests, the range's snapshot and template are then those of an instance that served
  // them (WarmUp). `report` (may be null) gets what the warm-up did.
  // An adoption's range `range` is the one its snapshot was taken in, and restores from that
  // snapshot when the capture here lays out the same buffers;
  // `imports` (null: none) gives this store's versions of them, once fetched.
  Result<Slot> DeployOnce(const std::shared_ptr<Function>& f, DeployOutcome* report, int range = 0,
                          const std::shared_future<Result<std::vector<uint64_t>>>* imports = nullptr);
  // Restores an instance in `slot`'s range, runs the spec's warm-up requests on it and checkpoints
  // it there: the slot then restores from that checkpoint (its deploy's template kept parked as
  // Slot::deployed). The instance is ended either way.
  Status WarmUp(const std::shared_ptr<Function>& f, Slot* slot, DeployOutcome* report);
  // Releases the templates and instance ranges of `slots` (outside mu_).
  void ReleaseSlots(const std::vector<Slot>& slots);
  // A free slot of `f` for instance `inst` (counted live already). For an instance restored for
  // a request: when that would make more instances than max_instances, an idle one is evicted (it
  // ends in the background, and `inst` takes another range, the spare, without waiting for it);
  // it waits (for an instance to become idle, a range to be scrubbed) until `deadline`. A warm
  // top-up neither evicts nor waits: without room it gives way (*gave_way). `waited` gets how long
  // it took. The caller holds `lock`.
  Result<size_t> AcquireSlotLocked(const std::shared_ptr<Function>& f, Instance& inst,
                                   std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                                   Clock::duration* waited, bool* gave_way);
  int FreeSlotLocked(const Function& f) const;
  // The index of the slot `inst` holds, or -1.
  static int HeldSlotLocked(const Function& f, const Instance& inst);
  // The node's device `inst` runs on (its first, for several GPUs).
  int DeviceOfLocked(const Function& f, const Instance& inst) const;
  // A process forked from `slot`'s template whose session (`*token`) restores the slot's snapshot
  // as `mode` says, or allocates in its range when the slot holds no GPU state; with
  // stop-the-world and eager, once every byte is copied.
  Result<SpawnedProcess> SpawnFromSlot(const FunctionSpec& spec, const Slot& slot, RestoreMode mode, bool learn,
                                       bool urgent, std::string* token);
  // Makes `slot` restore from a checkpoint of its instance (`version`, template `cpu`). The deploy's
  // template stays parked as Slot::deployed (a sandbox's first process: its end would end every
  // process forked in it); an earlier checkpoint's is returned, for the caller to release.
  static CpuStateRef AdoptCheckpoint(Slot& slot, uint64_t version, const CpuStateRef& cpu);
  // Makes the process of a new instance of `f` as `mode` says; a range is waited for until
  // `deadline` (the first invocation's, or start_timeout from now).
  Result<InstanceProcess> MakeProcess(const std::shared_ptr<Function>& f, Instance& inst, RestoreMode mode,
                                      bool learn, Clock::time_point deadline, StartReport* report);
  std::vector<uint64_t> VersionsLocked(const Function& f) const;
  // What answering began with: when, and for a restored instance the snapshot bytes on the
  // device then (-1 otherwise).
  struct Answered {
    Clock::time_point at;
    int64_t loaded_bytes = -1;
  };
  Answered AnswerBegins(const StartReport& report) const;
  // The stages of `inv`, brought up as `report` says, whose answer began as `answered` says.
  void FillStages(const Invocation& inv, const StartReport& report, const Answered& answered,
                  InvokeOutcome* out) const;

  InstanceManagerOptions options_;
  InvocationMetrics metrics_;
  std::string logs_dir_;
  std::string registry_path_;
  int stop_fd_ = -1;  // eventfd, readable once stopping: wakes instances blocked on their channel

  mutable std::mutex mu_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Function>> functions_;  // by key (VersionKey)
  std::map<std::string, VersionTable> versions_;                 // by function name
  int64_t last_stamp_ms_ = 0;                            // NewStampLocked
  std::vector<std::shared_ptr<Instance>> live_;      // every thread (instance or deploy) not joined
  std::vector<std::shared_ptr<Instance>> finished_;  // ended, thread to be joined
  uint64_t next_instance_id_ = 0;
  // Instances being restored for a waiting invocation, over all functions: warm top-ups wait for
  // them (a top-up's copies would share the copy engine with theirs).
  int request_restores_ = 0;
  size_t published_demand_ = 0;
  std::condition_variable supervisor_cv_;
  std::thread supervisor_;
};

InvokeOutcome Outcome(InvokeOutcome::Kind kind, std::string message);
inline DeployOutcome DeployFailed(Status status) {
  DeployOutcome o;
  o.status = std::move(status);
  return o;
}
// Waits for `fd` readable or the stop eventfd, up to `deadline`. 1 readable, 0 timeout, -1 stop.
int WaitReadable(int fd, int stop_fd, Clock::time_point deadline);

}  // namespace phos::runtime
