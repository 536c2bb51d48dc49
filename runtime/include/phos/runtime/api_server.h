// The API server (docs/remoting.md): executes each function instance's remoted CUDA runtime and
// cuBLAS calls on that instance's own context. One GPU session per instance token: a control
// socket (hello, version, token), a shared-memory call ring, one executor thread consuming the
// ring in order, virtual handles, and a buffer table against which every device pointer a call
// names is checked.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/sanitizers.h"
#include "phos/base/status.h"
#include "phos/ipc/ring.h"
#include "phos/driver/driver_table.h"

namespace phos::ctxpool {
class CommunicatorPool;
class ContextPool;
}  // namespace phos::ctxpool

namespace phos::store {
class ChunkSource;
class DramTier;
class Store;
struct Manifest;
}  // namespace phos::store

namespace phos::runtime {

class TrustedModules;

// How a single-GPU session starts (IssueToken). The default: an empty session on a pooled context.
struct SessionPlan {
  // The snapshot to restore (docs/design.md D7); null: the session starts empty.
  std::shared_ptr<const store::Manifest> manifest;
  // Where its chunks come from (a DramTier in front of the store); must outlive the session.
  store::ChunkSource* source = nullptr;
  store::DramTier* dram = nullptr;  // `source` when it is a DramTier, else null
  // Copy every buffer before the session serves its first call, instead of loading them while it
  // runs (the stop-the-world restore mode).
  bool stop_the_world = false;
  // Background loading in recorded first-touch order (false: address order, the no-order mode).
  bool first_touch_order = true;
  // A context created for this session rather than a pooled one (no-pool, stop-the-world and
  // cold-boot modes measure what the pool saves).
  bool fresh_context = false;
  // Record the order in which calls first touch the snapshot's buffers, and which of them a
  // call's speculated write set names, until TakeLearnedUsage.
  bool learn_first_touch = false;
  // The slot of the server's arena of instance ranges (ApiServer::ClaimVaSlot) that the session's
  // address space occupies: a deploy's session allocates there, and a restore of its snapshot
  // maps the buffers back there. -1: a range the driver picks (no snapshot can be restored
  // from it).
  int va_slot = -1;
  // Devices of the session: more than 1 leases a device group (the function's communicators come
  // from it); the instance range is then shared out between the devices.
  int gpus = 1;
  // The function the session runs (empty: not known; a snapshot's then stands in): its context is
  // leased for it, so that the modules its earlier instance kept loaded there serve this one, and
  // the session keeps its modules there for the next (docs/design.md D7).
  std::string function;
  // A request waits for this restore: its loader's copies go first, and the background streaming
  // of restores nobody waits for pauses while it loads (LoadPriority, docs/design.md D16).
  bool urgent = false;
  // The node's device a single-GPU session runs on (its device 0; a migrated instance's next
  // restore names the device it moved to). -1: the server's (ApiServerOptions::device). A device
  // the node does not have fails the restore.
  int device = -1;
};

// ThreadSanitizer confines mmap to its application ranges, so simgpu built with it reserves 512
// GiB of device address space rather than 8 TiB (simgpu/src/memory/device_memory.h): the instance
// ranges shrink to fit it.
#if defined(PHOS_THREAD_SANITIZER)
inline constexpr uint64_t kDefaultInstanceVaBytes = 8ull << 30;
inline constexpr int kDefaultVaSlots = 16;
#else
inline constexpr uint64_t kDefaultInstanceVaBytes = 64ull << 30;
inline constexpr int kDefaultVaSlots = 32;
#endif

// What one session may hold, whatever its function process sends (docs/design.md D17); beyond,
// the call fails as the driver's would (out of memory).
struct SessionLimits {
  // Bytes of module images, loaded or arriving, and how many modules.
  uint64_t module_bytes = 2ull << 30;
  size_t modules = 1024;
  // Device memory on all the session's devices together (a restored snapshot's buffers count);
  // 0: what the devices have. And how many buffers.
  uint64_t device_bytes = 0;
  size_t buffers = size_t{1} << 20;
  // Streams, events, cuBLAS handles and communicators together.
  size_t handles = 4096;
};

// What each session of one function may hold, below the server's own limits (ApiServerOptions's
// session_limits): each the smaller of the two. A field of 0 keeps the server's. Default: 0.
struct SessionQuota {
  uint64_t device_bytes = 0;  // device memory, on all the session's devices together
  size_t buffers = 0;         // device allocations
  size_t handles = 0;         // streams, events, cuBLAS handles and communicators together
  uint64_t module_bytes = 0;  // module images, loaded or arriving
};

// What a learning restore (SessionPlan::learn_first_touch) saw of the snapshot's buffers, by
// snapshot buffer index; empty vectors when the session was not learning.
struct LearnedUsage {
  std::vector<int32_t> first_touch;  // rank of the first call naming it; -1: none did
  // A call's speculated write set named it (an incomplete set names every buffer): not read-only.
  std::vector<bool> written;
};

// How a checkpoint of a running instance is taken (docs/design.md D10).
enum class CheckpointMode {
  kStopTheWorld,  // the instance serves nothing until its GPU state is copied and committed
  kSoftCow,       // consistent at its start: the instance runs on, a buffer about to be written is copied first
  kSoftRecopy,    // consistent at its end: copied while running, written buffers copied again in a final stop
};

// What a soft capture did beside copying (docs/design.md D10).
struct CaptureStats {
  // Soft copy-on-write: buffers a call's speculated write set named before they were copied.
  uint64_t copied_before_write = 0;
  // Buffers written by a call speculation did not expect, caught by validation (simgpu): copied
  // first (soft copy-on-write) or copied again at the final stop (soft recopy).
  uint64_t missed_writes = 0;
  // Soft recopy: buffers (and their bytes) copied at the final stop: written since their first
  // copy, or made since the capture began.
  uint64_t recopied = 0;
  uint64_t recopied_bytes = 0;
};

// How a session that runs on is captured (docs/design.md D10).
struct CaptureOptions {
  // Stop-the-world: the session's calls wait until the snapshot is committed. Soft copy-on-write:
  // they run on while its buffers are copied, each as it was at the capture's point (a call whose
  // speculated write set names one not copied yet has it copied first, its stream waiting for the
  // copy). Soft recopy: they run on while every buffer is copied, the buffers a call may have
  // written meanwhile are tracked, and `final_stop` makes the point at which those are copied
  // again.
  CheckpointMode mode = CheckpointMode::kStopTheWorld;
  // Soft modes: called once the calls may run on (copy-on-write: the point is taken), before any
  // byte is copied. Not called when the capture fails before. A token without a session (NotFound:
  // nothing to copy) still passes the point and the final stop.
  std::function<void()> at_point;
  // Soft recopy: called once the first copy of every buffer is in; returns when the session's
  // calls have stopped where the snapshot should stand (the caller keeps them stopped until
  // `resumed`), or fails the capture with the status it returns. Unset: the final stop is taken at
  // once, between two calls.
  std::function<Status()> final_stop;
  // Soft recopy: called once the final stop's copies are made, before the commit: the session's
  // calls may run again. Called on failure too once `final_stop` returned Ok.
  std::function<void()> resumed;
  // Soft recopy: called once the snapshot is committed (its version, and what was copied), before
  // what the capture does after (its guards lifted; the caller's own follow-up, such as pinning it
  // in the DRAM tier): all a migration's final stop waits for. Not called when the commit fails;
  // a follow-up of the caller's may still fail the capture after it was called.
  std::function<void(uint64_t version, const CaptureStats& copies)> committed;
  // Soft recopy: the session ends once the snapshot is committed (a migration's instance serves
  // nothing more): its guards are left to the session's end, which unmaps its ranges, rather than
  // lifted between the calls of an instance that runs on.
  bool session_ends = false;
  // Whether the snapshot is kept where restores read it fastest (the DRAM tier) once committed,
  // as a deploy's is (GpuSessions::Capture). A job's checkpoints are read only when it resumes
  // after a crash: kept cold, they cost the host no read of every byte back and push no function's
  // snapshot out of the tier.
  bool keep_hot = true;
  // Filled when the capture ends (soft modes), if not null.
  CaptureStats* stats = nullptr;
};

// When each stage of a session's start happened (steady clock; a default time point: not yet).
struct SessionTimeline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point issued;        // IssueToken
  Clock::time_point leased;        // the context leased (or created)
  Clock::duration pool_wait{};     // of which waited for the pool: zero when a context was ready
  Clock::time_point prepared;      // buffers mapped and handles recreated (stop-the-world: all copied)
  Clock::time_point connected;     // the function's frontend connected
  Clock::time_point first_launch;  // the first kernel or cuBLAS call executed
  Clock::time_point resident;      // every buffer loaded
  uint64_t required = 0;           // buffers a call had to wait for
  uint64_t misses = 0;             // speculation misses caught by validation
  uint64_t loaded_bytes = 0;       // buffer bytes on the device so far
  uint64_t snapshot_bytes = 0;     // buffer bytes of the snapshot restored
  uint64_t modules_loaded = 0;     // modules loaded for the session (not found kept in its context)
  // Of loaded_bytes: read-only buffers mapped from an allocation shared with other instances,
  // copied by none of this restore's loads (docs/design.md D14).
  uint64_t shared_bytes = 0;
  bool restored = false;           // the session came from a snapshot
};

struct ApiServerOptions {
  // Unix SOCK_SEQPACKET socket to listen on (phosd's gpu.sock); replaced if it exists. Required.
  std::string socket_path;
  // The socket file's mode, set once it is bound (the umask does not decide it). Default: 0660.
  mode_t socket_mode = 0660;
  // The group the socket file is given (chown), so that function users in it may connect;
  // -1: phosd's own. Default: -1.
  gid_t socket_group = static_cast<gid_t>(-1);
  // Peer uids (SO_PEERCRED, checked on every connection) accepted besides root and phosd's own:
  // inclusive ranges, the users functions run as. More may be allowed later (AllowPeerUids).
  // Default: none.
  std::vector<std::pair<uid_t, uid_t>> allowed_peer_uids;
  // How long a connection may take to send its hello before it is refused; and how many
  // connections may be waiting to (more are closed at once, logged rate-limited). Neither holds up
  // anyone else's session: the acceptor never waits for a peer. Default: 5 s, 64.
  std::chrono::milliseconds hello_timeout{5000};
  size_t max_pending_hellos = 64;
  // Tokens issued with a time to be claimed (IssueToken's `unclaimed_for`) that may wait unused
  // at once; issuing one more forgets the one closest to expiring. Default: 1024.
  size_t max_unclaimed_tokens = 1024;
  // The simgpu module images sessions may load (runtime/trusted_modules.h): phosd passes the
  // images the build made; an image not among them is refused, its kernels fail to launch. null:
  // any image loads (an embedding that trusts its function processes). Default: null.
  std::shared_ptr<const TrustedModules> trusted_modules;
  // What one session may hold, whatever its function sends; each function's SessionQuota may
  // lower it (SetFunctionQuota).
  SessionLimits session_limits;
  // Each session's ring: record bytes (a power of two) and reply-area bytes.
  // Default: ipc::Ring::kDefaultDataBytes, ipc::Ring::kDefaultReplyBytes.
  size_t ring_bytes = ipc::Ring::kDefaultDataBytes;
  size_t reply_bytes = ipc::Ring::kDefaultReplyBytes;
  // The device single-GPU sessions run on unless their plan names another (SessionPlan::device).
  // Default: 0.
  int device = 0;
  // The pools single-GPU sessions lease their contexts from, by device (entry d: device d's); they
  // must outlive the server. A device without one (a null entry, or none) gets a private pool
  // that keeps no context ready (each new session's lease then creates one, and contexts are
  // reused after their scrub). Default: none.
  std::vector<ctxpool::ContextPool*> context_pools;
  // The device groups (contexts on devices 0..N-1 plus a communicator over them) that sessions of
  // N >= 2 GPUs lease; it must outlive the server. nullptr: the server opens a private pool that
  // keeps no group ready (a session's lease waits for one to be created) when the driver table
  // has NCCL; without NCCL (logged) sessions of more than one GPU are refused. Default: nullptr.
  ctxpool::CommunicatorPool* device_groups = nullptr;
  // Address space each single-GPU session reserves on its first cudaMalloc: the session's device-0
  // allocations are carved out of it (runtime/va_allocator.h), so that they can be mapped back at
  // the same addresses on restore. 0: sessions allocate with cuMemAlloc instead. Allocations on
  // other devices and in device-group sessions always use cuMemAlloc. Default: 64 GiB (8 GiB in a
  // ThreadSanitizer build, whose simulated devices have 512 GiB of address space in all).
  uint64_t instance_va_bytes = kDefaultInstanceVaBytes;
  // Instance ranges reserved together at start for snapshots (ClaimVaSlot): a snapshot's buffers
  // come back at their addresses only if nobody else can have been given them meanwhile, and one
  // process (phosd) holds every session's memory. 0: none (snapshots are refused). Default: 32 (16
  // in a ThreadSanitizer build).
  int va_slots = kDefaultVaSlots;
  // Restores map read-only buffers from one allocation per device and content, shared by every
  // instance (docs/design.md D14); false: each instance copies its own. Default: true.
  bool share_read_only_buffers = true;
  // How long one call of a device-group session may wait while a collective of its is
  // half-entered (some ranks enqueued it, others not) before phosd aborts that communicator: its
  // ranks' waits end, and ncclCommGetAsyncError answers ncclSystemError on each. Every rank runs
  // on the session's one executor, so the ranks still to come are records queued behind the wait
  // and never come by themselves (docs/decisions.md, "A collective timeout in phosd"). 0: none;
  // only the session's end aborts. Default: 120 s.
  std::chrono::milliseconds collective_timeout{120000};
  // The longest a session's executor sleeps with no record in its ring before it looks again.
  // Whatever else it has to do (a capture's first step) wakes it sooner.
  std::chrono::milliseconds executor_idle_wait{20};
  // What time it is for token expiry (IssueToken's `unclaimed_for`): tests pass a clock they move
  // themselves, and then sweep with ExpireUnclaimedTokens instead of waiting for the acceptor.
  // Default: std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock = [] { return std::chrono::steady_clock::now(); };
};

// How an ending session gives back the instance range it borrowed (a VA slot).
enum class RangeRelease {
  // Zeroed, unmapped and released when EndSession returns: the range's next instance, on the same
  // device, has its memory back.
  kZeroed,
  // Unmapped when EndSession returns, the memory zeroed and released behind it by the context
  // pool's scrub (an instance that moves: its range is restored on another device at once).
  kUnmappedZeroedBehind,
};

class ApiServer {
 public:
  // Initialises the driver (cuInit) and starts listening. The server (and any pool it opens) holds
  // `driver` for as long as it is used.
  static Result<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options,
                                                  std::shared_ptr<driver::DriverTable> driver);
  // Ends every session and stops listening.
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // A fresh token (128-bit hex) that one frontend connection may present to open a session of
  // `gpus` devices: 1 leases a context from the context pool, more a device group (the function's
  // NCCL communicators come from it). More GPUs than the node has: the session's calls fail
  // (CUDA_ERROR_NO_DEVICE, logged). Callers validate `gpus` against device_count().
  std::string IssueToken(int gpus = 1);
  // The same, for a session of `function`: its quota (SetFunctionQuota) narrows the limits.
  std::string IssueToken(int gpus, const std::string& function);
  // The same, forgotten unless a frontend connects with it within `unclaimed_for` (a token handed
  // to a program outside phosd's instances, POST /v1/sessions, must not be valid for ever).
  std::string IssueToken(int gpus, std::chrono::milliseconds unclaimed_for);
  // Forgets the tokens whose `unclaimed_for` has passed (by ApiServerOptions::clock) with no
  // session. The acceptor does this about once a second; a test calls it to sweep at a known time.
  void ExpireUnclaimedTokens();
  // A token for a single-GPU session started as `plan` says: the restore (lease, mapping, loader)
  // begins now, while the function's process is being made, and the session adopts it when the
  // function connects.
  std::string IssueToken(SessionPlan plan);
  // Blocks until the token's restore is prepared (stop-the-world: every byte copied) or failed,
  // up to `timeout`. Ok at once for a token without a plan. NotFound for an unknown token.
  Status WaitPrepared(const std::string& token, std::chrono::milliseconds timeout);
  // The token's stage times so far. NotFound for an unknown token.
  Result<SessionTimeline> Timeline(const std::string& token) const;
  // Stops learning (SessionPlan::learn_first_touch) and returns what was learned; empty when the
  // session was not learning.
  LearnedUsage TakeLearnedUsage(const std::string& token);
  // Deploy (docs/design.md D5, D6): once every call the function sent has executed, quiesces the session's
  // context and captures its buffers, modules and virtual handles into `store` as a new snapshot
  // of `function` (atomic commit). The session stays open; ending it releases the GPU memory.
  // FailedPrecondition for a session that cannot be captured (several GPUs, or memory outside
  // its address space); NotFound when the token has no session.
  // `options` says how a session that runs on is captured (a checkpoint).
  Result<uint64_t> CaptureSession(const std::string& token, store::Store& store, const std::string& function,
                                  const std::string& device_profile, std::chrono::milliseconds timeout,
                                  const CaptureOptions& options = {});
  // Ends the token's session, if any, releasing its context, memory, streams, events, modules and
  // handles, and forgets the token. Unknown tokens are ignored. `how`: when the session's
  // instance range is zeroed (RangeRelease).
  void EndSession(const std::string& token, RangeRelease how = RangeRelease::kZeroed);
  // The token's session belongs to an instance about to move to another device or node: however
  // it ends from now on (EndSession, or the server's own end once the process is gone and its
  // control socket closed), its range is released as RangeRelease::kUnmappedZeroedBehind. Said
  // before the process ends, so that the move's restore does not wait for the range's zeroing.
  void MarkMoving(const std::string& token);
  // Sessions ended so far as RangeRelease::kUnmappedZeroedBehind (their instance range, where they
  // borrowed one, unmapped and left to the pool's scrub to zero).
  uint64_t ranges_zeroed_behind() const;
  // The quota of the sessions of `function` (tokens issued for it: IssueToken(gpus, function), or
  // a SessionPlan naming it) opened from now on; an all-zero quota forgets the function's.
  void SetFunctionQuota(const std::string& function, SessionQuota quota);
  // A free slot of the arena of instance ranges, now the caller's (a deployed function's snapshot
  // lives there): slot `wanted` when given. Unavailable when every slot (or `wanted`) is taken or
  // there is no arena.
  Result<int> ClaimVaSlot(int wanted = -1);
  void ReleaseVaSlot(int slot);
  // The context pool's demand (ctxpool::ContextPool::SetDemand): restores that may lease at once.
  void SetContextDemand(size_t contexts);
  // Until the context pool has nothing left to make or scrub, `timeout` passes or `stopping` (if
  // given; looked at every 100 ms) says so: whether it got there.
  bool WaitForContexts(std::chrono::milliseconds timeout, const std::function<bool()>& stopping);
  // Accepts connections from the uids first..last (inclusive) from now on (ApiServerOptions::
  // allowed_peer_uids): the users functions are given as they are made.
  void AllowPeerUids(uid_t first, uid_t last);
  // Sessions currently open.
  size_t session_count() const;
  const std::string& socket_path() const;
  // The driver's device count (cuDeviceGetCount); 0 when the driver cannot tell.
  int device_count() const;
  // Where single-GPU sessions run unless their plan names a device (ApiServerOptions::device).
  int default_device() const;

  class Impl;

 private:
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phos::runtime
