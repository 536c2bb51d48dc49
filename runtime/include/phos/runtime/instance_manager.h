// The instance manager (docs/remoting.md): the function registry and the function processes
// ("instances") that serve invocations. Each instance is a process spawned with an invocation
// channel (PHOS_INVOKE_FD) and, when GPU sessions are wired, PHOS_GPU_SOCKET and
// PHOS_INSTANCE_TOKEN. An instance is ready when its SDK serve loop sends the ready frame (the
// pre-entry point). Invocations go to an idle instance, or queue while all are busy. An instance
// that times out is killed; one that dies or closes its channel mid-request is discarded; in both
// cases the function is topped up to its warm count again and the instance's GPU session ended.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/cpu_state.h"
#include "phos/runtime/instance_registry.h"
#include "phos/runtime/restore_mode.h"
#include "phos/runtime/sandbox.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace phos::runtime {

// A restore token's session (GpuSessions::IssueRestoreToken).
struct RestoreRequest {
  std::string function;
  uint64_t version = 0;  // the snapshot; 0: an empty session allocating in the range, as a deploy's does
  // How (kColdBoot: an empty session on a fresh context, no range).
  RestoreMode mode = RestoreMode::kPhos;
  // Record the first-touch order and the buffers' access classes for SaveFirstTouch.
  bool learn = false;
  int va_slot = -1;  // the instance range
  int gpus = 1;
  // A request waits for this restore, whose copies then go before those of restores nobody waits
  // for (warm top-ups).
  bool urgent = false;
  int device = -1;  // the node's device a single-GPU session runs on; -1: the API server's
};

// What instances need from the API server: one session token per instance, for the number of
// GPUs its function declared (FunctionSpec::gpus), ended with the instance. phosd adapts
// ApiServer to this; tests run without GPU sessions.
class GpuSessions {
 public:
  virtual ~GpuSessions() = default;
  // A session token for an instance of `function` (whose limits its session gets) on `gpus` devices.
  virtual std::string IssueToken(int gpus, const std::string& function) = 0;
  // A token for a program outside the instance manager (POST /v1/sessions): forgotten if unused
  // for a while. Default: IssueToken.
  virtual std::string IssueExternalToken(int gpus) { return IssueToken(gpus, ""); }
  virtual void EndSession(const std::string& token) = 0;
  // The session of an instance about to move to another device or node, said before its process
  // ends: however the session ends from then on, its instance range is free when the end returns,
  // its memory zeroed behind (the move restores the range elsewhere at once). Default: nothing.
  virtual void MarkMoving(const std::string& /*token*/) {}
  // What each GPU session of `function` may hold from now on (its spec's session_* limits; all 0
  // when it is removed). Default: nothing (no limits to narrow).
  virtual void SetFunctionLimits(const std::string& /*function*/, const FunctionSpec::Limits& /*limits*/) {}
  // The path instances connect to (PHOS_GPU_SOCKET).
  virtual std::string SocketPath() const = 0;
  // The devices a session may use: the node's, as its driver counts them. A function asking for
  // more GPUs is refused when it is registered.
  virtual int DeviceCount() const = 0;
  // The device a single-GPU session runs on unless its restore names another. Default: 0.
  virtual int DefaultDevice() const { return 0; }

  // Snapshots (docs/design.md D5, D7; runtime/snapshot_sessions.h implements them over the API server and
  // the store). Without them (the defaults), functions are not deployed: instances are spawned.
  virtual bool SupportsSnapshots() const { return false; }
  // An instance range of the API server's arena (ApiServer::ClaimVaSlot): where one deployed
  // instance's memory lives, captured and restored. Each live instance of a snapshot needs its own.
  virtual Result<int> ClaimVaSlot();
  // Instance range `slot` in particular (a job's, whose checkpoints belong to it); Unavailable when
  // it is taken.
  virtual Result<int> ClaimVaSlotAt(int slot);
  virtual void ReleaseVaSlot(int slot);
  // Ok when snapshots `a` and `b` of `function` lay out the same buffers (address, size, device)
  // in the same instance range: the GPU state of one may stand in for the other's.
  virtual Status SameLayout(const std::string& function, uint64_t a, uint64_t b);
  // Keeps `function`'s snapshot `version`, committed without a capture here (another node's,
  // imported), where restores read it fastest, as a capture keeps its own.
  virtual void Stage(const std::string& function, uint64_t version);
  // Captures the GPU session of `token` as a new snapshot of `function`, as `options` says (a
  // deploy's session is parked: the defaults): its version. NotFound when the token has no session
  // (the function made no CUDA call: it has no GPU state).
  virtual Result<uint64_t> Capture(const std::string& token, const std::string& function,
                                   const CaptureOptions& options);
  // A token whose session restores as `request` says.
  virtual Result<std::string> IssueRestoreToken(const RestoreRequest& request);
  // Blocks until the token's restore is prepared (stop-the-world: all copied).
  virtual Status WaitPrepared(const std::string& token, std::chrono::milliseconds timeout);
  virtual SessionTimeline Timeline(const std::string& token);
  // The bytes of the buffers of `function`'s snapshot `version`; 0 when there is none.
  virtual uint64_t SnapshotBytes(const std::string& function, uint64_t version);
  // Whether `function`'s snapshot `version` has a recorded first-touch order.
  virtual bool HasFirstTouch(const std::string& function, uint64_t version);
  // Persists the first-touch order and the access classes (read-only: no call's write set named
  // the buffer) the token's session learned with each of `versions` (snapshots of one function,
  // alike in layout); false when it learned none.
  virtual bool SaveFirstTouch(const std::string& token, const std::string& function,
                              const std::vector<uint64_t>& versions);
  // Deletes every snapshot of `function` but `keep` (none: it was removed).
  virtual void RetainOnly(const std::string& function, const std::vector<uint64_t>& keep);

  // Capacity (docs/design.md D16): the contexts restores may lease at once soon, which the
  // instance manager keeps equal to the instance ranges free for them. The context pool keeps
  // that many ready (or on their way). Default: ignored.
  virtual void SetContextDemand(size_t contexts);
  // Until the context pool holds what SetContextDemand asked for, or cannot make more (at its
  // maximum, or after a failed creation), or `timeout` passes, or `stopping` (if given) says so:
  // whether it got there.
  virtual bool WaitForContexts(std::chrono::milliseconds timeout, const std::function<bool()>& stopping);
};

// What happened to an instance (InstanceManagerOptions::on_event).
struct InstanceEvent {
  enum class Kind {
    kStarted,   // ready, spawned or forked without GPU state from a snapshot
    kRestored,  // ready, its GPU state restored from a snapshot
    kEvicted,   // asked to end, idle, because a restore needed its place
    kEnded,     // its process is gone (evicted, idle past its keep-alive, failed, removed, stopping)
  };
  Kind kind = Kind::kStarted;
  std::string function;  // the function's name
  uint64_t version = 1;  // the function's version it is an instance of
  uint64_t instance = 0;
  RestoreMode mode = RestoreMode::kWarm;  // how it was brought up
};
// "started", "restored", "evicted", "ended".
const char* InstanceEventName(InstanceEvent::Kind kind);

// A version a deploy on this node made (InstanceManagerOptions::on_deployed): the version, and the
// snapshot each of its instance ranges restores from, as the store holds it.
struct DeployedVersion {
  FunctionVersion version;  // spec.name the function's
  struct Range {
    int va_slot = -1;            // the instance range: its addresses are the snapshot's
    std::string store_function;  // the snapshot's function in the store (the version's key)
    uint64_t snapshot = 0;       // and its version there; 0: the function holds no GPU state
  };
  std::vector<Range> ranges;
};

// A version deployed on another node of a cluster, to serve here too (InstanceManager::Adopt,
// docs/design.md D19).
struct AdoptedVersion {
  // As it was deployed there: its number, spec (spec.name the function's), executable digest.
  FunctionVersion version;
  // The instance range of each of its snapshots there, in the order of `import`'s answer.
  std::vector<int> va_slots;
  // Brings its snapshots into this node's store as versions of `store_function` (the key this
  // node gives the version): their versions, one per entry of va_slots. Called from the deploy's
  // thread; its failure fails the adoption.
  std::function<Result<std::vector<uint64_t>>(const std::string& store_function)> import;
};

struct InstanceManagerOptions {
  // Holds functions.json and logs/<name>-<pid>.log. Created if missing. Required.
  std::string data_dir;
  // Invocation deadline (queueing included) when the caller gives none. Default: 30000 ms.
  std::chrono::milliseconds invoke_timeout{30000};
  // Time from spawn to the ready frame before an instance is killed. Default: 60000 ms.
  std::chrono::milliseconds start_timeout{60000};
  // Time an instance gets to exit after its channel is closed (shutdown, removal) before it is
  // killed. Default: 2000 ms.
  std::chrono::milliseconds stop_grace{2000};
  // Delay before replacing an instance that failed to start; doubles per consecutive failure,
  // up to 30 s. Default: 500 ms.
  std::chrono::milliseconds restart_backoff{500};
  // GPU sessions for instances; nullptr runs instances without PHOS_GPU_SOCKET. Must outlive the
  // manager. Default: nullptr.
  GpuSessions* sessions = nullptr;
  // Where deployed functions' CPU state is kept (docs/design.md D9: a fork template, or CRIU). With it and
  // sessions that support snapshots, Register deploys the function (runs it to its entry point,
  // captures its GPU and CPU state) and instances are restored from that; without, they are
  // spawned. Must outlive the manager. Default: nullptr.
  CpuStateBackend* cpu_state = nullptr;
  // phos's CUDA libraries as the serving daemon has them (lib/phos/frontend of its tree): first in
  // the LD_LIBRARY_PATH of the function processes it starts, so that a function uses the
  // libraries of the phosd that serves it, whatever phos it was built against and wherever that
  // lies (a RUNPATH the sandbox's uid cannot traverse included). Empty: the function's own
  // RUNPATH decides. Default: empty.
  std::string function_library_dir;
  // Where function processes are confined (each function's cgroup is made at registration and
  // removed with the function); nullptr: not at all. Must outlive the manager. Default: nullptr.
  Sandbox* sandbox = nullptr;
  // How long an instance started for an invocation beyond the warm count stays idle before it
  // ends. Default: 60 s.
  std::chrono::milliseconds keep_alive{60000};
  // Each function log (logs/<name>-<pid>.log, the function's stdout and stderr) is cut to a fresh
  // start past this size, its earlier part kept as <log>.1 (BoundFunctionLogs, about once a
  // second); 0: never cut. Default: 64 MiB.
  uint64_t max_log_bytes = uint64_t{64} << 20;
  // Where the manager registers its metrics: phos_invocations_total{mode}, the histograms
  // phos_invocation_stage_seconds{mode,stage} (time from arrival to each stage),
  // phos_invocation_wait_seconds{mode,wait} (InvokeOutcome::waits) and phos_instance_retire_seconds
  // (an instance's end: process, session, range scrubbed), and phos_speculation_misses_total.
  // Null: a registry of the manager's own. Default: nullptr.
  std::shared_ptr<prometheus::Registry> metrics_registry;
  // Earlier versions of each function kept to roll back to (their specs and executables' digests,
  // in functions.json); past it the oldest is forgotten. 0..1000. Default: 10.
  int kept_versions = 10;
  // Told each InstanceEvent, from the instance's thread, holding no lock of the manager's (it must
  // not block: a slow consumer queues). Default: none.
  std::function<void(const InstanceEvent&)> on_event;
  // Told each version a deploy on this node made serve (not one adopted from another node, nor a
  // restart's deploy of what it served before), once its snapshots are final (a sample request's
  // first-touch order recorded): what the remote tier uploads and the cluster registry publishes.
  // Called from the deploy's thread, holding no lock of the manager's. Default: none.
  std::function<void(const DeployedVersion&)> on_deployed;
};

// What a deploy did (InstanceManager::Deploy).
struct DeployOutcome {
  Status status;  // Ok: deployed (its snapshots committed, its CPU state kept)
  // Whether the deploy ran a sample request (it had one and the function deployed), and how that
  // went: Ok, or why it failed or timed out. A failed sample does not fail the deploy.
  bool sample_ran = false;
  Status sample;
  // The first-touch order is recorded (by the sample); otherwise the first invocation records it.
  bool first_touch_learned = false;
  // When the deploy answered, the context pool held what the function's restores may lease at once
  // (false: it was still making them, or could make no more).
  bool contexts_ready = false;
  // Post-warm-up snapshots (FunctionSpec::warmup), of the first instance range: the buffer bytes of
  // its snapshot at the entry point and after the warm-up, and how long the warm-up requests took
  // there (what a cold start no longer spends on them).
  bool warmed_up = false;
  uint64_t pre_entry_bytes = 0;
  uint64_t warmed_bytes = 0;
  std::chrono::microseconds warmup_time{0};
  // The version deployed (FunctionVersion::number); 0 when it failed.
  uint64_t version = 0;
};

struct InvokeOutcome {
  enum class Kind {
    kOk,               // body is the function's response
    kFunctionError,    // the handler failed: error carries its code and message
    kInstanceLost,     // the instance died or closed its channel mid-request (discarded)
    kTimeout,          // the deadline passed (a busy instance was killed)
    kUnknownFunction,  // no such function, or it was removed while the request waited
    kStopping,         // the manager is shutting down
    kOverloaded,       // the function's queue was full (FunctionSpec::max_queue): try again later
  };
  Kind kind = Kind::kOk;
  std::string body;
  Status error;
  // How the instance that served it was brought up (kWarm: it was running already).
  RestoreMode mode = RestoreMode::kWarm;
  // Stage name -> microseconds from the invocation's arrival ("lease", "cpu-resume",
  // "first-launch", "first-byte", "resident"), for the stages this invocation went through.
  std::vector<std::pair<std::string, int64_t>> stages;
  // Waits of a restored instance's first invocation, in microseconds: "range-wait" (for a free
  // instance range: 0 unless every range was in use or being scrubbed) and "pool-wait" (for a
  // context: 0 when one was ready).
  std::vector<std::pair<std::string, int64_t>> waits;
  // Restored instances' first invocation: touches of buffers outside the speculated read/write
  // sets that validation caught by then (docs/design.md D8); -1 otherwise.
  int64_t speculation_misses = -1;
  // Restored instances' first invocation: bytes of the snapshot's buffers on the device when the
  // answer's first byte arrived, and the snapshot's buffer bytes (docs/design.md D7); -1 otherwise.
  int64_t loaded_bytes_at_first_byte = -1;
  int64_t snapshot_bytes = -1;
  // Instances brought up for this invocation: modules loaded into the context on the way to its
  // first launch (0 when the function's earlier instance kept them loaded in the pooled context,
  // docs/design.md D7); -1 otherwise.
  int64_t modules_loaded = -1;
  // Of those loaded bytes: read-only buffers mapped from allocations other instances share
  // (docs/design.md D14), not copied; -1 when not restored.
  int64_t shared_bytes = -1;
  // The function sent pieces before this outcome and they went to the invocation's piece
  // callback: body is the last piece only, and an error here comes after pieces already sent.
  bool streamed = false;
  // Served by another node the function moved to (InstanceManager::Migrate): its name. Empty when
  // served here.
  std::string node;
};

// Called on the instance's thread with each piece of a response the function sends in pieces, as
// it arrives; `head` (mode, stages and waits as far as the first piece, whose arrival is the
// "first-byte" stage) with the first piece only, null after.
using PieceCallback = std::function<void(std::string piece, const InvokeOutcome* head)>;

// One invocation, as InstanceManager::Invoke takes it.
struct InvokeCall {
  std::string request;
  // Its deadline from now; 0: the function's timeout_ms, else phosd's invoke_timeout.
  std::chrono::milliseconds timeout{0};
  RestoreMode mode = RestoreMode::kAuto;
  // Where the pieces of a response sent in pieces go as they arrive; empty: gathered into the
  // outcome's body.
  PieceCallback on_piece;
  // The request's id (its X-Request-Id), handed to the function before the request when its SDK
  // takes ids (phos::fn::RequestId()). Empty: none.
  std::string request_id;
};

// "stop-the-world", "soft-cow", "soft-recopy"; nothing for any other name.
std::optional<CheckpointMode> ParseCheckpointMode(std::string_view name);
const char* CheckpointModeName(CheckpointMode mode);

// Where a long-running job stands (InstanceManager::Job; FunctionSpec::Job).
struct JobStatus {
  int64_t step = 0;   // the last step its instance answered
  int64_t steps = 0;  // where it stops (0: when removed)
  bool finished = false;
  struct Kept {
    uint64_t version = 0;
    int64_t step = 0;
  };
  std::vector<Kept> checkpoints;  // oldest first; the newest is where it resumes
  // Every step's loss as the job answered it, a line "<step>\t<loss>" each; a step run again after
  // a resume has a later line, which is the one that counts.
  std::string losses_path;
};

// What a checkpoint did (InstanceManager::Checkpoint).
struct CheckpointOutcome {
  // Ok: a new snapshot version of the function holds the instance's GPU state and a new template
  // its CPU state, both at one point between two of its requests; the function's next restores
  // in that instance range start from there. NotFound: no such function or instance;
  // FailedPrecondition: the instance cannot be checkpointed (why is said); NotSupported: a mode or
  // CPU-state backend not built yet.
  Status status;
  uint64_t instance = 0;
  CheckpointMode mode = CheckpointMode::kStopTheWorld;
  uint64_t version = 0;  // the committed snapshot version; 0 when the function holds no GPU state
  // From the checkpoint's start to the instance being free to serve again (what a request that
  // arrived meanwhile waited for), and to the version committed.
  std::chrono::microseconds stall{0};
  std::chrono::microseconds total{0};
  // Soft copy-on-write: buffers copied before a call wrote them, and before a write speculation
  // missed (caught by validation, simgpu).
  CaptureStats copies;
};

// Another node an instance can move to (docs/design.md D10), as the frontend reaches it (phosd:
// over its HTTP API). Thread-safe; its calls may block, never on the manager's lock.
class PeerNode {
 public:
  // What the peer made of a snapshot sent to it.
  struct Received {
    uint64_t version = 0;   // the snapshot version there
    uint64_t instance = 0;  // the instance restored from it there
    uint64_t sent_chunks = 0;  // chunks the peer lacked, and their bytes
    uint64_t sent_bytes = 0;
  };
  virtual ~PeerNode() = default;
  // For messages and answers: "http://127.0.0.1:7071".
  virtual std::string Name() const = 0;
  // Sends snapshot `version` of `function` (its manifest, and the chunks the peer does not hold)
  // and has the peer restore an instance of its `function` from it in instance range `va_slot`
  // (the range's index, the same on both nodes: the process's pointers are its addresses).
  // Returns once that instance is ready there.
  virtual Result<Received> SendSnapshot(const std::string& function, uint64_t version, int va_slot) = 0;
  // Serves an invocation of `function` there (its request, deadline from now and request id; the
  // node there picks how); `done` is called exactly once, from any thread.
  virtual void Invoke(const std::string& function, InvokeCall call, std::function<void(InvokeOutcome)> done) = 0;
};

// Where a migration takes an instance: a device of this node, or another node.
struct MigrationTarget {
  int device = -1;
  std::shared_ptr<PeerNode> node;
};

// What a migration did (InstanceManager::Migrate).
struct MigrationOutcome {
  // Ok: the instance's state, checkpointed at its final stop (a soft recopy), was restored on
  // device `to`, where the instance (the same id, a new process) serves on; requests that arrived
  // meanwhile waited for it. NotFound: no such function or instance; FailedPrecondition: the
  // instance cannot move (why is said); InvalidArgument: a device the node does not have, or the
  // one it is on. A migration that failed before its final stop leaves the instance serving where
  // it was; one that failed after it leaves the instance range holding the checkpoint (the next
  // restore there starts from it, on `to`).
  Status status;
  uint64_t instance = 0;
  int from = 0;
  int to = 0;  // -1 for another node
  // A move to another node: its name, the instance serving there and the snapshot version it was
  // restored from there, and the chunks sent (those it lacked).
  std::string node;
  uint64_t node_instance = 0;
  uint64_t node_version = 0;
  uint64_t sent_chunks = 0;
  uint64_t sent_bytes = 0;
  uint64_t version = 0;  // the checkpoint the instance was restored from on `to`
  // From the final stop to the instance ready on `to`: the time it served nothing. And from the
  // migration's start to then.
  std::chrono::microseconds downtime{0};
  std::chrono::microseconds total{0};
  // The downtime's parts: the final stop to the checkpoint committed (the CPU state kept, the
  // buffers written since their copy copied again, the version committed); to the instance's
  // process ended and its session's memory released on `from`; to the new process ready on `to`.
  std::chrono::microseconds committing{0};
  std::chrono::microseconds releasing{0};
  std::chrono::microseconds restoring{0};
  // What the recopy copied while the instance ran, and again at its final stop.
  CaptureStats copies;
};

// One instance of a function, as InstanceManager::Instances lists it.
struct InstanceStatus {
  uint64_t id = 0;
  std::string state;  // "starting", "idle", "busy", "ending"
  pid_t pid = -1;     // -1 until its process is made
  RestoreMode mode = RestoreMode::kWarm;  // how it was brought up
  bool restored = false;  // its GPU state came from a snapshot (it can be checkpointed)
  int device = 0;         // the node's device it runs on (its first, for several GPUs)
};

struct FunctionStatus {
  FunctionSpec spec;
  int starting = 0;  // spawned, not yet ready
  int idle = 0;
  int busy = 0;
  int ending = 0;  // evicted or idle past their keep-alive: their process and range being released
  size_t queued = 0;
  // Its instance moved to another node, which serves its invocations now (forwarded there); empty
  // when it runs here.
  std::string moved_to;
  // Invocations forwarded there and not answered yet (at most spec.max_queue, when set).
  size_t forwarding = 0;
  // What its deploy under way is doing: "running to its entry point", "capturing its GPU state",
  // "keeping its CPU state", "warming up", "running the sample request", "filling the context
  // pool". Empty when no deploy is under way.
  std::string deploy_stage;
  // The version serving the function's name, and a newer one deploying to replace it (0: none).
  uint64_t version = 1;
  uint64_t deploying_version = 0;
};

// One version of a function, as InstanceManager::Versions lists it.
struct VersionStatus {
  FunctionVersion version;
  std::string state;  // "serving", "deploying" (to replace the serving one) or "kept"
  // When the function's name was registered on this node (Register, or Adopt of a name new here;
  // Unix ms, made one past the last given out when the clock repeats itself): the same for each of
  // its versions, whatever was deployed, rolled back or deleted since, until the name is removed;
  // a name registered afresh gets another.
  int64_t registered_at_ms = 0;
};

// What a removal conditional on what its caller saw of a function names (InstanceManager::
// RemoveIfHeld): the registration of its name (VersionStatus::registered_at_ms; 0: not known) and
// the deploy then serving it (version `number` deployed at `deployed_at_ms`).
struct HeldFunction {
  int64_t registered_at_ms = 0;
  uint64_t number = 0;
  int64_t deployed_at_ms = 0;
  bool operator==(const HeldFunction&) const = default;
  // Of one registration when both know theirs, else the same deploy; one naming no deploy
  // (number 0) is any.
  bool SameAs(const HeldFunction& other) const {
    if (number == 0 || other.number == 0) return true;
    if (registered_at_ms != 0 && other.registered_at_ms != 0) {
      return registered_at_ms == other.registered_at_ms;
    }
    return number == other.number && deployed_at_ms == other.deployed_at_ms;
  }
};

class InstanceManager {
 public:
  // Loads <data_dir>/functions.json and starts each function's warm instances.
  static Result<std::unique_ptr<InstanceManager>> Open(const InstanceManagerOptions& options);
  // Shutdown()s.
  ~InstanceManager();
  InstanceManager(const InstanceManager&) = delete;
  InstanceManager& operator=(const InstanceManager&) = delete;

  // Validates, persists and starts spec.instances warm instances. AlreadyExists for a taken name.
  // With snapshots (InstanceManagerOptions::cpu_state and sessions that support them), the
  // function is deployed in the background first (see Deploy); its instances are restored.
  Status Register(const FunctionSpec& spec);
  // Register, then `done` once the function is deployed (docs/design.md D5, D9): run to its entry
  // point in each of its instance ranges, its GPU state captured into a snapshot and its CPU state
  // kept (a fork template), its GPU memory released. A non-empty `sample_request` is then run on a
  // restored instance, with `sample_timeout` (0: options.invoke_timeout), to record the order in
  // which its buffers are first touched (without one, or when it fails, the first invocation
  // records it); the outcome says how it went. Then, up to start_timeout, the deploy waits for
  // the context pool to hold what the function's restores may lease at once. A function that fails
  // to reach its entry point is unregistered and the outcome's status says why. Without snapshots,
  // `done` follows registration at once. Called from a manager thread.
  void Deploy(const FunctionSpec& spec, std::string sample_request, std::chrono::milliseconds sample_timeout,
              std::function<void(DeployOutcome)> done);
  // Deploys `spec` as a new version of the function spec.name (docs/design.md D18): deployed as
  // Deploy does, beside the version serving, which serves meanwhile; once deployed it serves the
  // name (the queued invocations move to it) and the earlier one is kept to roll back to, its
  // instances ending once idle. NotFound for a name not registered, FailedPrecondition while
  // another version of it deploys or for a job; a failed deploy leaves the serving one as it was.
  void DeployVersion(const FunctionSpec& spec, std::string sample_request, std::chrono::milliseconds sample_timeout,
                     std::function<void(DeployOutcome)> done);
  // Serves `name` with kept version `version` (0: the newest kept one older than the serving one)
  // again: deployed anew from its spec as DeployVersion does, when its executable is still the
  // program it was (its SHA-256), else FailedPrecondition. NotFound for an unknown function or
  // version.
  void Rollback(const std::string& name, uint64_t version, std::function<void(DeployOutcome)> done);
  // Serves a version deployed on another node (docs/design.md D19) here: registered, or deployed as
  // DeployVersion deploys over an older version serving, under its own number. Its executable must
  // be the program it ran there (its SHA-256), else FailedPrecondition. The function is run to
  // its entry point in each instance range its snapshots were taken in (for the CPU state, which
  // does not travel), its GPU state captured, and each range then restores from the imported
  // snapshot when its own capture lays out the same buffers (else from its own, logged): every
  // node serves the bytes the deploy made. Ok at once, with the version serving, when this node
  // serves that version or a newer one already; FailedPrecondition while another version deploys.
  void Adopt(AdoptedVersion adopted, std::function<void(DeployOutcome)> done);
  // `name`'s versions, oldest first. NotFound for an unknown function.
  Result<std::vector<VersionStatus>> Versions(const std::string& name) const;
  // Forgets kept version `version` of `name`. NotFound for an unknown function or version,
  // FailedPrecondition for the serving or deploying one.
  Status DeleteVersion(const std::string& name, uint64_t version);
  // Forgets the function (its kept versions too), fails its queued invocations (kUnknownFunction)
  // and stops its instances once their current request is answered. NotFound for an unknown name.
  Status Remove(const std::string& name);
  // Remove, only while `name` is the registration `held` names, checked under the lock the
  // removal takes: whatever versions it deployed, rolled back to or deleted since, while a name
  // removed and registered afresh meanwhile (which numbers its versions from 1 again) stays.
  // Without the registration (0: a caller's note from before it was kept), only while the name
  // holds the deploy `held` names (serving, deploying or kept): gone once it is deleted, pushed
  // out past kept_versions or rolled back to (a rollback is a deploy of its own). One naming no
  // deploy (number 0) is any, as Remove (HeldFunction::SameAs). FailedPrecondition when the name is
  // another registration or holds no such deploy; NotFound for an unknown name.
  Status RemoveIfHeld(const std::string& name, const HeldFunction& held);
  std::vector<FunctionStatus> List() const;
  // The spec of the function `name`, or nothing when there is none.
  std::optional<FunctionSpec> Spec(const std::string& name) const;

  // Runs `request` on an instance of `name`; `done` is called exactly once, from a manager
  // thread (or the caller's, for an unknown function). timeout 0 = options.invoke_timeout.
  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
              std::function<void(InvokeOutcome)> done);
  // The same, served as `mode` says: kAuto and kWarm take an idle instance (kAuto restores one
  // when none is idle, kWarm queues); the restore modes bring up a new instance for this
  // invocation (it then serves others until it has been idle for keep_alive). A restore mode
  // for a function that was not deployed is served warm.
  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout, RestoreMode mode,
              std::function<void(InvokeOutcome)> done);
  // The same, with the pieces of a response sent in pieces going to `on_piece` as they arrive
  // (without it they are gathered into the outcome's body).
  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout, RestoreMode mode,
              PieceCallback on_piece, std::function<void(InvokeOutcome)> done);
  // The same, with everything an invocation may carry (InvokeCall).
  void Invoke(const std::string& name, InvokeCall call, std::function<void(InvokeOutcome)> done);

  // The instances of `name`, oldest first. NotFound for an unknown function.
  Result<std::vector<InstanceStatus>> Instances(const std::string& name) const;
  // Checkpoints instance `instance` of `name` (0: an idle one, else the oldest) as `mode` says, at
  // the first point it is idle (after the request it serves, if any); `done` is called exactly
  // once, from a manager thread (or the caller's, when refused at once).
  void Checkpoint(const std::string& name, uint64_t instance, CheckpointMode mode,
                  std::function<void(CheckpointOutcome)> done);
  // Moves instance `instance` of `name` (0: an idle one, else the oldest) to the node's device
  // `device` (docs/design.md D10): a soft-recopy checkpoint while it serves, then at its final
  // stop its process ends and its range is restored from the checkpoint on `device`; requests
  // sent meanwhile queue for it. Single-GPU instances of a deployed function. `done` is called
  // exactly once, as Checkpoint's is.
  //
  // To another node (`target.node`): the same recopy and final stop, then the checkpoint is sent
  // there and restored in the same instance range by that node's deploy of the function (its own
  // template for the CPU side: the function must keep its state on the device, as a job does);
  // from then on this node forwards every invocation of the function there, those that queued
  // during the move first. Only the function's one running instance moves this way.
  void Migrate(const std::string& name, uint64_t instance, MigrationTarget target,
               std::function<void(MigrationOutcome)> done);
  // The receiving side of a move from another node: the function's instance range `va_slot`
  // restores from snapshot `version` (imported into this node's store) under its deploy's
  // template, once its layout is checked against the range's; the instance living there is asked
  // to end, and a new one is restored there at once. `done` (exactly once) gets the new instance
  // and the version once it is ready, or why not: refused before the range took the snapshot
  // (MigrationOutcome::version 0: nothing restores from it), or after (version set: the range keeps
  // it, and its next restore starts from it).
  void AdoptSnapshot(const std::string& name, int va_slot, uint64_t version,
                     std::function<void(MigrationOutcome)> done);
  // The log files of `name`'s instances and deploys (<data_dir>/logs/<name>-<pid>.log: each
  // process's standard output and error, cut past max_log_bytes), oldest first. NotFound for an
  // unknown function.
  Result<std::vector<std::string>> LogFiles(const std::string& name) const;
  // Where job `name` stands. NotFound for an unknown function; FailedPrecondition for one that is
  // not a job.
  Result<JobStatus> Job(const std::string& name) const;
  // Fails queued invocations (kStopping), closes every instance's channel, waits for them to
  // exit (killing those past stop_grace), ends their GPU sessions. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit InstanceManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phos::runtime
