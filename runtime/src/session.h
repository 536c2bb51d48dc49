// One GPU session: an instance's context, call ring, executor thread, virtual handles and buffer
// table. Private to the API server.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <nccl.h>

#include "phos/base/status.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ipc/ring.h"
#include "phos/runtime/buffer_table.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/blas_operands.h"
#include "phos/driver/driver_table.h"
#include "phos/runtime/param_metadata.h"
#include "phos/runtime/restore_loader.h"
#include "phos/runtime/snapshot_capture.h"
#include "phos/runtime/speculation.h"
#include "phos/runtime/trusted_modules.h"
#include "phos/runtime/va_allocator.h"
#include "collective_watch.h"
#include "guard_clients.h"
#include "host_fn_gates.h"
#include "restore_state.h"
#include "session_graphs.h"
#include "session_ops.h"

namespace phos::store {
class Store;
}

namespace phos::runtime {

// What one session may load and hold: its limits (api_server.h) and the module images it may
// load (null: any; fatbins go to NVIDIA's driver, which runs no host code of theirs, and are not
// checked).
struct SessionRules : SessionLimits {
  std::shared_ptr<const TrustedModules> trusted_modules;
  // ApiServerOptions::collective_timeout.
  std::chrono::milliseconds collective_timeout{0};
  // ApiServerOptions::executor_idle_wait.
  std::chrono::milliseconds idle_wait{20};
};

class Session {
 public:
  // A single-GPU session (the function declared gpus = 1). `device` is the node device that is the
  // session's device 0 (session device d is node device (device + d) mod count); contexts on the
  // others are created when the function first uses them. The context is the lease's (on node
  // device `device`); it goes back to the pool, with everything the session made in it, when the
  // session ends. NCCL communicators are refused (a function that wants them declares its GPUs).
  // Device-0 allocations come from an instance address space of `va_bytes` reserved on the first
  // allocation (0: cuMemAlloc); its mappings and range go to the lease's scrub at the end.
  static Result<std::unique_ptr<Session>> Open(driver::DriverTable* driver, ctxpool::ContextLease lease, int device,
                                               uint64_t va_bytes, std::unique_ptr<ipc::Ring> ring, std::string token,
                                               int control_fd, int pid, SessionRules rules);
  // A session of `gpus` (>= 2) devices: before executing its first call, the executor leases a
  // device group of that size from `groups` (which must outlive the session) and runs session
  // device d in the group's context d; ncclCommInitAll / ncclCommInitRank get the group's
  // communicator. The group goes back, to be scrubbed, when the session ends. A lease that fails
  // (no group ready in time, more GPUs than the node has) fails every call with
  // CUDA_ERROR_NO_DEVICE, logged.
  static Result<std::unique_ptr<Session>> OpenWithGroup(driver::DriverTable* driver, ctxpool::CommunicatorPool* groups, int gpus,
                                                        std::unique_ptr<ipc::Ring> ring, std::string token,
                                                        int control_fd, int pid, SessionRules rules);
  // A single-GPU session that starts from `restore` (session_restore.cc): before executing its
  // first call, the executor waits for the restore's preparation and adopts its context, address
  // space, buffers, virtual handles and loader; until every buffer is resident, each call's
  // read/write set is speculated and the call waits on the stream for the buffers it names. A
  // preparation that failed fails every call (CUDA_ERROR_NO_DEVICE, logged). `metadata` (kernel
  // parameter kinds by module hash) must outlive the session.
  static Result<std::unique_ptr<Session>> OpenRestored(driver::DriverTable* driver, std::shared_ptr<RestoreState> restore,
                                                       ParamMetadataCache* metadata, uint64_t va_bytes,
                                                       std::unique_ptr<ipc::Ring> ring, std::string token,
                                                       int control_fd, int pid, SessionRules rules);
  // Each factory owns control_fd once it returns a session (closed when the session ends); one
  // that fails leaves it to the caller.
  // Stops the executor and releases everything the session holds.
  ~Session();
  // How the destructor gives back the borrowed instance ranges (RangeRelease); set before it runs.
  void set_range_release(RangeRelease how) { range_release_ = how; }

  // Captures the session into `store` once the ring is drained (on the executor, between calls),
  // within `timeout`: a deploy's, or a checkpoint's as `options` says (soft modes: the executor
  // runs on while this thread copies the buffers).
  Result<uint64_t> Capture(store::Store& store, const std::string& function, const std::string& device_profile,
                           std::chrono::milliseconds timeout, const CaptureOptions& options);
  // Stage times and loader counters (restored sessions; thread-safe).
  SessionTimeline Timeline() const;

  ipc::Ring& ring() { return *ring_; }
  int control_fd() const { return control_fd_; }
  const std::string& token() const { return token_; }

 private:
  // A module global the session resolved (kModuleGlobalGet) in one device's instance of its module.
  struct Global {
    CUdeviceptr address = 0;
    uint64_t bytes = 0;
  };
  struct Module {
    CUmodule module = nullptr;
    bool is_fatbin = false;
    CUresult load_result = CUDA_SUCCESS;
    uint64_t total_bytes = 0;
    std::vector<uint8_t> pending;  // image bytes until the last chunk arrives
    std::vector<uint8_t> image;    // kept after loading, for the contexts of other devices
    std::unordered_map<int, CUmodule> on_device;  // session device >= 1 -> module loaded there
    ModuleHash hash;                              // of `image` (restored sessions: metadata key)
    // The globals the session resolved, by session device and name: what a capture saves (device
    // 0's) and what is zeroed before the module is unloaded.
    std::map<std::pair<int, std::string>, Global> globals;
  };
  struct Function {
    CUfunction function = nullptr;  // in the device-0 context
    std::vector<ipc::ParamSlot> params;
    uint32_t param_bytes = 0;
    uint64_t module_id = 0;
    std::string name;
    std::unordered_map<int, CUfunction> on_device;  // session device >= 1
    std::shared_ptr<const KernelParamMetadata> meta;  // restored sessions: for speculation
    // Attributes the session set on device 0's handle, with the value each had before, and whether
    // it set a cache preference: put back when the session ends, so that a module its context
    // keeps loaded for the function's next instance holds the function as it loaded (and as the
    // snapshot knows it).
    std::map<int, int> attributes_before;
    bool cache_config_set = false;
  };
  // A reduction ncclRedOpCreatePreMulSum made on a rank (session_nccl_collectives.cc).
  struct NcclRedOp {
    int32_t datatype = 0;
    uint64_t device_scalar = 0;  // ncclScalarDevice: where the scalar is (checked at each use)
  };
  // A communicator a function holds (session_nccl.cc): a rank of the device group's
  // communicator, or a split of it (owned: destroyed at the end).
  struct NcclComm {
    ncclComm_t comm = nullptr;  // null until every rank of an ncclCommInitRank rendezvous arrived
    int device = 0;             // session device
    bool owned = false;
    // The communicator the rank is part of (kGroupClique: the device group's own), its rank there
    // and its size; rank and size are known once `comm` is.
    uint64_t clique = 0;
    int rank = 0;
    int nranks = 0;
    bool finalized = false;  // ncclCommFinalize: no new work may name it
    // The communicator was aborted under it (NcclAbort of another rank of the group's, or
    // AbortHalfEntered): only destroy and abort may still name it, and ncclCommGetAsyncError
    // answers `lost_error`.
    bool lost = false;
    ncclResult_t lost_error = ncclInvalidUsage;
    std::map<int32_t, NcclRedOp> ops;
  };
  // One rank's part of an ncclCommSplit, held until every rank of the communicator made it.
  struct NcclSplitMember {
    bool joined = false;
    int color = 0;
    int key = 0;
    uint64_t vid = 0;  // the new rank's virtual id; 0 for NCCL_SPLIT_NOCOLOR
    uint64_t parent_vid = 0;
    ncclComm_t parent = nullptr;
    int device = 0;
  };
  struct NcclRendezvous {
    std::vector<int> devices;     // by rank; -1 until the rank arrives
    std::vector<uint64_t> comms;  // virtual communicators by rank
  };
  // What the session knows of one communicator's ranks.
  struct NcclClique {
    // Collectives enqueued on each rank: ranks that differ mean one was left half-entered, which a
    // rank with more waits for for ever (ReleaseNccl, NcclFinalize).
    std::vector<uint64_t> collectives;
    // ncclCommSplit calls of each rank, and the communicators those splits make: the k-th split of
    // every rank with one color is one new communicator.
    std::vector<uint64_t> splits;
    std::map<std::pair<uint64_t, int>, uint64_t> split_cliques;  // (split number, color) -> clique
    std::map<uint64_t, std::vector<NcclSplitMember>> open_splits;  // by split number, members by rank
  };
  // A call queued between ncclGroupStart and the outermost ncclGroupEnd (session_nccl_collectives.cc):
  // what runs it, the communicators it needs still live then (virtual id, driver communicator),
  // and, for a send or a receive, what the group's check matches.
  struct NcclQueued {
    std::function<ncclResult_t()> run;
    std::vector<std::pair<uint64_t, ncclComm_t>> needs;
    // Device memory it names (base, bytes), the session's still at the end: the function may free
    // a buffer between the call and the group's end.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    bool p2p = false;
    bool send = false;
    uint64_t clique = 0;
    int rank = 0;
    int peer = 0;
    uint64_t count = 0;
    int32_t datatype = 0;
  };
  // The device group's own communicator, among the session's cliques.
  static constexpr uint64_t kGroupClique = 1;
  // Calls one group may queue: each holds a closure until the group ends.
  static constexpr size_t kMaxQueuedNcclCalls = 65536;

  // One record per virtual handle: the driver's object, what capture needs to recreate it, and
  // the session device it belongs to (a call naming it runs in that device's context).
  struct StreamHandle {
    CUstream stream = nullptr;
    unsigned flags = 0;
    int device = 0;
    int priority = 0;  // as created, clamped to the device's range
  };
  struct EventHandle {
    CUevent event = nullptr;
    unsigned flags = 0;
    int device = 0;
  };
  struct BlasHandle {
    cublasHandle_t handle = nullptr;
    int device = 0;
    uint64_t stream = 0;  // cublasSetStream's virtual stream: a capture refuses its work
  };

  Session(driver::DriverTable* driver, std::unique_ptr<ipc::Ring> ring, std::string token, int control_fd, int pid,
          SessionRules rules);
  void Run();
  // A call of a session that maps shared read-only buffers failed, its context in the sticky
  // illegal-address state: the context is lost, and the fault may be a write to a shared buffer that
  // speculation missed (docs/design.md D14). The function's later restores load private copies,
  // and its process is ended so that the instance is discarded, its invocation failing.
  void OnSharedBufferFault();
  // Copy-on-write decided before the call (docs/design.md D14): each shared buffer in the gated
  // call's speculated write set (every one, when the sets are incomplete) becomes the session's
  // own: withdrawn if it was still loading here and nobody else maps it, else a private copy.
  // `all`: the call may write any buffer (its sets overflowed, or it could not be analysed).
  CUresult CopySharedOnWrite(bool all);
  // session_restore.cc
  // Adopts the restore's preparation (executor thread, before the first call).
  Status AdoptRestore();
  // Before a call of a restoring (or learning) session: its buffers jump the load queue and the
  // call's stream waits for them; first touches are noted.
  CUresult Gate(const ipc::RecordView& record);
  // The read/write set of `record` and the stream it runs on (kSets); kNone for calls that name no
  // device memory or do not decode (Execute refuses those); kUnknown for a launch that runs but
  // whose parameters cannot be analysed (it may touch, and write, any buffer).
  enum class Speculation { kNone, kSets, kUnknown };
  Speculation Speculate(const ipc::RecordView& record, AccessSets* sets, CUstream* stream);
  // Speculate for the cuBLAS compute records (their operands: blas_operands.h; a pointer-array
  // batch's matrices from its arrays, read).
  Speculation SpeculateBlasCall(const ipc::RecordView& record, AccessSets* sets, CUstream* stream);
  Result<uint64_t> CaptureNow(store::Store& store, const std::string& function, const std::string& device_profile);
  // What a capture records of the session now (its buffers, modules, handles), on the executor.
  Result<CaptureRequest> DescribeForCapture(const std::string& function, const std::string& device_profile);

  // ---- soft captures (session_soft_capture.cc, docs/design.md D10) ----
  // One buffer of a soft capture: its bytes (copy-on-write: as of the capture's point), in pieces
  // of pinned host memory (kSoftPieceBytes each), enqueued in order from the start.
  struct SoftCopy {
    uint64_t base = 0;
    uint64_t size = 0;
    int device = 0;
    std::vector<void*> pieces;  // per piece: its host memory once enqueued, until the writer took it
    size_t enqueued = 0;        // pieces [0, enqueued) are enqueued (or copied)
    CUevent copied = nullptr;   // after the last piece, when a copy before a write finished the buffer
    bool on_host = false;       // the rest copied by the guard handler, before a write speculation missed
    bool taken = false;         // the writer has all its bytes
    int unit = -1;              // its guarded unit (SoftCapture::units); -1: none
    // Soft recopy: a call may have written it since the capture began (its copy is stale), or
    // freed it (nothing more of it is copied).
    bool dirty = false;
    bool freed = false;
  };
  // Shared by the executor, which copies a buffer before a call writes it, the capturing thread,
  // which copies the others one by one and takes every buffer's bytes, and (on simgpu) the guard
  // thread: the buffers not copied yet are guarded against writes, so that a write speculation
  // missed is held until the buffer is copied.
  struct SoftCapture final : GuardClient {
    bool Owns(CUdeviceptr address) const override;
    PhosSimGuardDecision OnFault(CUdeviceptr address, const char* what) override;

    // Pages holding buffers, guarded together.
    struct Unit {
      uint64_t start = 0;
      uint64_t bytes = 0;
      std::vector<int> buffers;
      bool guarded = false;
    };
    driver::DriverTable* driver = nullptr;
    int pid = 0;
    // Soft recopy: written buffers are marked dirty, not copied first, and stay guarded once
    // copied (a write speculation missed marks them too) until the final stop.
    bool recopy = false;
    bool stopped = false;  // a recopy's final stop is taken: writes since do not count
    // A migration's recopy, committed: the session ends without serving again, and its guards are
    // left to the unmap of its ranges rather than lifted; a write that faults on one meanwhile
    // lifts that one.
    bool lift_on_fault = false;
    mutable std::mutex mu;
    std::vector<SoftCopy> buffers;   // in the capture request's order
    std::vector<Unit> units;          // in address order
    std::vector<CUcontext> contexts;  // per session device
    std::vector<CUstream> streams;    // per session device: the lowest priority, the capture's own pieces
    std::vector<CUstream> cow_streams;  // per session device: the highest priority, copies before a write
    std::vector<CUevent> background;  // per session device: after the last piece enqueued on `streams`
    std::vector<void*> spare_pieces;  // pinned pieces the writer is done with, for the next ones
    bool registered = false;          // a guard client
    CaptureStats stats;
    Status failed;          // a copy before a write could not be made: the capture fails with this
    bool finished = false;  // the capture ended: nothing more is copied
  };
  // At the point (on the executor, every call sent so far finished): the request with the module
  // globals' bytes read, and soft_ set so that calls from then on copy before they write
  // (copy-on-write) or mark what they write (recopy).
  struct SoftBegun {
    CaptureRequest request;  // its read serves the buffers from `capture`
    std::shared_ptr<SoftCapture> capture;
  };
  Result<SoftBegun> BeginSoftCapture(const std::string& function, const std::string& device_profile, bool recopy);
  // A soft recopy's final stop, on the executor: every call finished, the session described again,
  // and the snapshot written over `ahead` (a buffer no call wrote since its copy keeps it; the rest
  // read now), uncommitted. The guards stay until UnguardSoftCapture.
  Result<std::unique_ptr<store::SnapshotWriter>> FinishSoftRecopy(store::Store& store, const std::string& function,
                                                                  const std::string& device_profile, Precopy& ahead);
  // Marks buffer `index` of a soft recopy dirty with the buffers sharing its guarded pages, which
  // are unguarded (the caller holds the capture's lock).
  static void MarkDirty(driver::DriverTable& driver, SoftCapture& capture, int index);
  // Lifts the capture's write guards (thread-safe; a recopy's capturing thread does it after the
  // final stop, off the instance's time, `pace`d: a pause between two ranges).
  // Units for which `keep` (when set) is true stay guarded.
  static void UnguardSoftCapture(driver::DriverTable& driver, SoftCapture& capture, bool pace,
                                 const std::function<bool(const SoftCapture::Unit&)>& keep = nullptr);
  // Enqueues on `stream` the copies of `b`'s pieces from b.enqueued to `until` (a piece count) and
  // records `*done` (made when null) after them (the caller holds the capture's lock).
  static Status EnqueueSoftCopy(driver::DriverTable& driver, SoftCapture& capture, SoftCopy& b, CUstream stream,
                                size_t until, CUevent* done);
  // Guards the capture's buffers against writes where the driver can (simgpu).
  static void GuardSoftCapture(driver::DriverTable& driver, SoftCapture& capture);
  // The capture request's read: buffer `index`'s bytes as of the point (the capturing thread).
  Status ReadSoftCopy(SoftCapture& capture, size_t index, uint64_t offset, void* dst, size_t bytes);
  // Before the executor runs `record`: every buffer it may write (or free) copied first, its stream
  // made to wait for those copies.
  CUresult CopyBeforeWrite(const ipc::RecordView& record);
  // Frees what a finished capture still holds (streams, events, host copies) and lifts its guards;
  // on the executor, or at the session's end. `unmapping`: the session ends with its borrowed
  // ranges unmapped and their memory zeroed behind (RangeRelease::kUnmappedZeroedBehind, a
  // migration's source), and the guards inside them are left to the unmap, which forgets them
  // (lifting them first is simgpu's page-table work over every byte of the instance, inside the
  // move's downtime). The capture is returned then, still a guard client, for the caller to
  // unregister once the ranges are unmapped; null otherwise.
  std::shared_ptr<SoftCapture> ReleaseSoftCapture(bool unmapping = false);
  // The index of the buffer of `buffers` (in address order) that starts at `base`, or -1.
  static int FindSoftCopy(const std::vector<SoftCopy>& buffers, uint64_t base);
  // A task the executor runs when its ring is empty (Capture), and whether one waits.
  void RunPendingTask();
  bool TaskPending();
  // Has the executor run `task` between two calls, and waits for it: Timeout when it was not taken
  // within `timeout` (`what` says what waited), FailedPrecondition when another task waits.
  Status RunOnExecutor(std::function<void()> task, std::chrono::milliseconds timeout, const char* what);
  // Leases the device group (OpenWithGroup sessions), on the executor thread.
  Status LeaseGroup();
  void ReleaseAll();
  // The lease's part of ReleaseAll for the modules: those of images the function sent, and the
  // snapshot's it did not use, are kept loaded in the context for its next instance; the rest go
  // to the scrub.
  void ReleaseModules();
  // The pooled cuBLAS handle of session device 0's context.
  cublasHandle_t PooledBlas() const { return lease_ ? lease_->blas_handle() : group_->blas_handle(0); }

  // The call table (session_ops.cc): every opcode's handler, bound to its typed argument record.
  friend const OpHandler* FindOpHandler(uint16_t opcode);
  static std::array<OpHandler, static_cast<size_t>(ipc::Op::kOpCount)> BuildOpTable();
  // Executes one record through its handler; writes reply bytes to the reply area and sets
  // *reply_len. Unknown opcodes and records of the wrong size are refused, logged by name.
  CUresult Execute(const ipc::RecordView& record, size_t* reply_len);
  // CUDA_SUCCESS, or the call's refusal when the library it needs is missing.
  CUresult LibraryReady(const OpHandler& handler);
  CUresult Pad(const NoArgs& a, const Call& call);

  // Handlers: session_devices.cc
  CUresult DeviceGetCount(const NoArgs& a, const Call& call);
  CUresult DriverGetVersion(const NoArgs& a, const Call& call);
  CUresult SetDevice(const ipc::DeviceArgs& a, const Call& call);
  // Every attribute, the name, UUID and memory of one device, for the frontend's cache.
  CUresult DeviceGetProperties(const ipc::DeviceArgs& a, const Call& call);
  // The current device's memory as this session may use it: the driver's figures, bounded by the
  // session's device memory limit (what it holds counted against it).
  CUresult MemGetInfo(const NoArgs& a, const Call& call);
  // cudaDeviceReset of the current device: waits for its work (and a restore still loading its
  // buffers), then destroys the cuBLAS handles, events and streams made on it, frees its buffers
  // and disables the peer access it enabled or granted. Modules stay loaded: the function's kernels
  // launch again after a reset, as its runtime registers them anew on CUDA.
  CUresult DeviceReset(const NoArgs& a, const Call& call);
  CUresult DeviceCanAccessPeer(const ipc::PeerArgs& a, const Call& call);
  CUresult DeviceEnablePeer(const ipc::PeerArgs& a, const Call& call);
  CUresult DeviceDisablePeer(const ipc::PeerArgs& a, const Call& call);
  // session_memory.cc
  CUresult MemAlloc(const ipc::SizeArgs& a, const Call& call);
  CUresult MemFree(const ipc::PointerArgs& a, const Call& call);
  CUresult MemcpyHtoD(const ipc::CopyArgs& a, const Call& call);
  CUresult MemcpyDtoH(const ipc::CopyArgs& a, const Call& call);
  CUresult MemcpyDtoD(const ipc::CopyArgs& a, const Call& call);
  CUresult Memset(const ipc::MemsetArgs& a, const Call& call);
  CUresult Memcpy2D(const ipc::Copy2DArgs& a, const Call& call);
  CUresult Memset2D(const ipc::Memset2DArgs& a, const Call& call);
  CUresult MemFreeAsync(const ipc::StreamPointerArgs& a, const Call& call);
  // The bytes `height` rows of `width` bytes, `pitch` apart, span from the first row's start; false
  // when rows would overlap (a pitch below the width) or the span does not fit in 64 bits.
  static bool PitchedSpan(uint64_t pitch, uint64_t width, uint64_t height, uint64_t* span);
  // session_streams.cc
  CUresult DeviceSynchronize(const NoArgs& a, const Call& call);
  CUresult StreamCreate(const ipc::FlagsArgs& a, const Call& call);
  CUresult StreamCreateWithPriority(const ipc::StreamCreateArgs& a, const Call& call);
  // Flags and a priority checked, the priority clamped to the device's range as the driver does.
  CUresult CreateStream(unsigned flags, int priority, const Call& call);
  CUresult StreamGetInfo(const ipc::HandleArgs& a, const Call& call);
  CUresult StreamPriorityRange(const NoArgs& a, const Call& call);
  // The host function of `a.slot` queued on its stream (host_fn_gates.h).
  CUresult LaunchHostFunc(const ipc::HostFnArgs& a, const Call& call);
  // A kLaunchHostFunc that failed: its slot goes back to the frontend as refused, so that its
  // host-function thread does not wait for it.
  void RefuseHostFn(const ipc::RecordView& record, CUresult result);
  CUresult StreamDestroy(const ipc::HandleArgs& a, const Call& call);
  CUresult StreamSynchronize(const ipc::HandleArgs& a, const Call& call);
  CUresult StreamQuery(const ipc::HandleArgs& a, const Call& call);
  CUresult StreamWaitEvent(const ipc::StreamEventArgs& a, const Call& call);
  CUresult EventCreate(const ipc::FlagsArgs& a, const Call& call);
  CUresult EventDestroy(const ipc::HandleArgs& a, const Call& call);
  CUresult EventRecord(const ipc::StreamEventArgs& a, const Call& call);
  CUresult EventSynchronize(const ipc::HandleArgs& a, const Call& call);
  CUresult EventQuery(const ipc::HandleArgs& a, const Call& call);
  CUresult EventElapsedTime(const ipc::StreamEventArgs& a, const Call& call);
  // session_modules.cc
  CUresult ModuleChunk(const ipc::ModuleChunkArgs& a, const Call& call);
  // Loads the complete image m.pending in the current context, if the session may load it.
  CUresult LoadModuleImage(Module& m);
  // The driver API's module calls: the result a complete module loaded with, and its unload on
  // every device once the kernels queued there have run.
  CUresult ModuleLoadResult(const ipc::HandleArgs& a, const Call& call);
  CUresult ModuleUnload(const ipc::HandleArgs& a, const Call& call);
  CUresult FunctionGet(const ipc::FunctionGetArgs& a, const Call& call);
  // The kernel `name` of module `module_id` (0: the first of the session's modules, in
  // registration order, that has it) as a new function id of the session.
  CUresult ResolveFunction(uint64_t module_id, const std::string& name, uint64_t* out);
  CUresult Launch(const ipc::LaunchArgs& a, const Call& call);
  // A launch's checks before the driver sees it: its function on the record's device, its
  // parameter buffer (copied out of the ring into `params`, kMaxParamBytes + 8 bytes), every
  // pointer-sized word in it against the session's memory (docs/design.md D8), and its stream.
  // Fills `args` (kMaxParams entries) with pointers into `params`.
  CUresult PrepareLaunch(const ipc::LaunchArgs& a, std::span<const uint8_t> tail, uint8_t* params, void** args,
                         CUfunction* function, CUstream* stream);
  // session_functions.cc: attributes, occupancy, launches with attributes, module globals.
  // The function `vid` names on the record's device.
  CUresult RoutedFunction(uint64_t vid, Function** fn, CUfunction* out);
  CUresult FuncGetAttributes(const ipc::FunctionArgs& a, const Call& call);
  CUresult FuncSetAttribute(const ipc::FuncAttributeArgs& a, const Call& call);
  CUresult FuncSetCacheConfig(const ipc::FuncCacheConfigArgs& a, const Call& call);
  CUresult OccupancyMaxBlocks(const ipc::OccupancyArgs& a, const Call& call);
  CUresult OccupancyDynamicSMem(const ipc::OccupancySMemArgs& a, const Call& call);
  CUresult LaunchEx(const ipc::LaunchExArgs& a, const Call& call);
  CUresult ModuleGlobalGet(const ipc::FunctionGetArgs& a, const Call& call);
  // Puts back the attributes the session set on device 0's functions (Function::attributes_before).
  void RestoreFunctionAttributes();
  // Zeroes the globals the session resolved in `m` on session device `device` (whose context is
  // current) before the module is unloaded: the driver may give their memory to another tenant's
  // allocation in this context as it is.
  void ZeroGlobals(const Module& m, int device);
  // session_blas.cc
  CUresult BlasCreate(const NoArgs& a, const Call& call);
  CUresult BlasDestroy(const ipc::HandleArgs& a, const Call& call);
  CUresult BlasSetStream(const ipc::StreamEventArgs& a, const Call& call);
  CUresult BlasSetMathMode(const ipc::BlasModeArgs& a, const Call& call);
  CUresult BlasLevel1(const ipc::BlasLevel1Args& a, const Call& call);
  CUresult BlasLevel2(const ipc::BlasLevel2Args& a, const Call& call);
  CUresult BlasLevel3(const ipc::BlasLevel3Args& a, const Call& call);
  // session_blas_gemm.cc
  CUresult Gemm(const ipc::GemmArgs& a, const Call& call);
  // session_blas_lt.cc: every operand checked (LtMatmulOperands), then run on phosd's own cuBLASLt
  // handle of the record's device with descriptors built from the record.
  CUresult BlasLtMatmul(const ipc::BlasLtMatmulArgs& a, const Call& call);
  // session_nccl.cc
  CUresult NcclInitAll(const ipc::NcclInitAllArgs& a, const Call& call);
  CUresult NcclInitRank(const ipc::NcclInitRankArgs& a, const Call& call);
  CUresult NcclSplit(const ipc::NcclSplitArgs& a, const Call& call);
  CUresult NcclDestroy(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclCount(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclUserRank(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclFinalize(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclAbort(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclGetAsyncError(const ipc::HandleArgs& a, const Call& call);
  CUresult NcclCuDevice(const ipc::HandleArgs& a, const Call& call);
  // session_nccl_collectives.cc
  CUresult NcclGroupStart(const NoArgs& a, const Call& call);
  CUresult NcclGroupEnd(const NoArgs& a, const Call& call);
  CUresult NcclGroupEndSync(const ipc::NcclGroupEndArgs& a, const Call& call);
  CUresult NcclCollective(const ipc::NcclCollectiveArgs& a, const Call& call);
  CUresult NcclSend(const ipc::NcclP2pArgs& a, const Call& call);
  CUresult NcclRecv(const ipc::NcclP2pArgs& a, const Call& call);
  CUresult NcclRedOpCreate(const ipc::NcclRedOpArgs& a, const Call& call);
  CUresult NcclRedOpDestroy(const ipc::NcclRedOpArgs& a, const Call& call);
  CUresult NcclPointToPoint(const ipc::NcclP2pArgs& a, bool send, const Call& call);
  // session_graphs.cc: explicit graphs and executable graphs.
  CUresult GraphCreate(const NoArgs& a, const Call& call);
  CUresult GraphDestroy(const ipc::HandleArgs& a, const Call& call);
  CUresult GraphAddNode(const ipc::GraphNodeArgs& a, const Call& call);
  CUresult GraphAddDependencies(const ipc::GraphEdgesArgs& a, const Call& call);
  CUresult GraphDestroyNode(const ipc::GraphNodeRef& a, const Call& call);
  CUresult GraphGetNodes(const ipc::HandleArgs& a, const Call& call);
  CUresult GraphNodeGetParams(const ipc::GraphNodeRef& a, const Call& call);
  CUresult GraphNodeSetParams(const ipc::GraphNodeArgs& a, const Call& call);
  CUresult GraphClone(const ipc::HandleArgs& a, const Call& call);
  CUresult GraphInstantiate(const ipc::GraphInstantiateArgs& a, const Call& call);
  CUresult GraphUpload(const ipc::StreamEventArgs& a, const Call& call);
  CUresult GraphLaunch(const ipc::StreamEventArgs& a, const Call& call);
  CUresult GraphExecUpdate(const ipc::GraphUpdateArgs& a, const Call& call);
  CUresult GraphExecNodeSetParams(const ipc::GraphNodeArgs& a, const Call& call);
  CUresult GraphExecDestroy(const ipc::HandleArgs& a, const Call& call);
  // A node as the call it stands for would be checked, on session device `device` (whose context
  // is current): its kernel and parameters as a launch's, its ranges inside the session's memory,
  // its event one of the session's on that device. A host node carries nothing (its function
  // stays in the function process).
  CUresult CheckGraphNode(const GraphNodeRecord& node, int device);
  // Adds `node` (checked) to `graph` after its dependencies; its index goes to *index.
  CUresult AppendGraphNode(GraphRecord& graph, GraphNodeRecord node, uint32_t* index);
  // The driver's graphs and executable graphs of `exec.nodes`, one per stage, in the current
  // context (session_graph_stages.cc).
  CUresult BuildDriverGraph(GraphExecRecord& exec, unsigned long long flags);
  // Adds device node `n` to the driver's `graph` after `deps`.
  CUresult AddDriverNode(const GraphNodeRecord& n, CUgraph graph, const std::vector<CUgraphNode>& deps,
                         CUcontext context, CUgraphNode* out);
  void DestroyDriverGraph(GraphExecRecord& exec);
  // Destroys every executable graph's driver objects (the session's end).
  void ReleaseGraphs();
  // Restored graphs: kernel nodes named by kernel name get a function id of this session, and an
  // executable graph its driver objects, when first needed (the function's modules arrive with its
  // first calls).
  CUresult ResolveGraphKernels(std::vector<GraphNodeRecord>& nodes);
  CUresult EnsureDriverGraph(GraphExecRecord& exec);
  // A capture's record of the session's graphs (session_restore.cc's CaptureNow), and their
  // recreation from a snapshot under the same handles (AdoptRestore).
  Status CaptureGraphs(std::vector<store::GraphState>* out) const;
  void AdoptGraphs(const std::vector<store::GraphState>& graphs);
  // session_capture.cc: stream capture.
  CUresult StreamBeginCapture(const ipc::CaptureArgs& a, const Call& call);
  CUresult StreamEndCapture(const ipc::CaptureArgs& a, const Call& call);
  CUresult StreamCaptureInfo(const ipc::HandleArgs& a, const Call& call);
  // While a capture is in progress, before a record runs: records work on a capturing stream as a
  // node of its capture's graph, joins streams through events recorded in a capture, and refuses
  // (invalidating the capture) what a capture cannot hold. True when the record was handled here
  // (its result in *result); false when it runs as usual.
  bool Capture(const OpHandler& handler, const ipc::RecordView& record, const Call& call, CUresult* result);
  // Refuses a call during capture `capture`: the capture is invalidated, as the driver does.
  CUresult InvalidateCapture(uint64_t capture, CUresult why, const char* call);
  // Ends capture `capture`: its streams stop capturing and its events forget it.
  void EndCaptureOf(uint64_t capture);

  // cuBLAS (session_blas.cc, session_blas_gemm.cc).
  // The CUresult an asynchronous cuBLAS call fails with: CUDA_ERROR_INVALID_VALUE and
  // CUDA_ERROR_NOT_SUPPORTED for what the library refused so, CUDA_ERROR_LAUNCH_FAILED otherwise.
  static CUresult BlasFailure(cublasStatus_t s);
  // The library handle of virtual handle `vid`, set to `pointer_mode` for the call; NotFound for
  // a handle the session does not have.
  Result<cublasHandle_t> BlasComputeHandle(uint64_t vid, int32_t pointer_mode);
  // CUDA_SUCCESS when the record is one phosd serves and every operand lies inside the session's
  // buffers; CUDA_ERROR_INVALID_VALUE (logged with the call's name) otherwise.
  CUresult CheckBlasOperands(const BlasOperands& ops, const Call& call);
  static const void* BlasScalarArg(const ipc::BlasScalar& s, int32_t pointer_mode);
  // A pointer-array batched GEMM: its arrays read and every entry checked, then run on phosd's
  // copy of the checked pointers.
  CUresult GemmPointerBatch(const ipc::GemmArgs& a, cublasHandle_t handle, const void* alpha, const void* beta,
                            const Call& call);
  // The pointers of a pointer-array batch (A's and B's only when k > 0), read from device memory
  // once the context's work is done (and, restoring, once the arrays' buffers are loaded).
  struct BlasPointerArrays {
    std::vector<uint64_t> a, b, c;
  };
  Status ReadGemmPointerArrays(const ipc::GemmArgs& a, BlasPointerArrays* out);
  // phosd's device memory of at least `bytes` in the record's device context, for checked
  // pointer arrays; kept for the next batch, freed at the session's end (ReleaseBlasScratch).
  Result<CUdeviceptr> BlasPointerScratch(uint64_t bytes);
  void ReleaseBlasScratch();
  // phosd's cuBLASLt handle in the record's device context, created on its first matmul;
  // destroyed at the session's end (ReleaseBlasLt).
  Result<cublasLtHandle_t> BlasLtHandle();
  void ReleaseBlasLt();
  // Restoring sessions (session_restore.cc): loads the buffers [ptr, ptr + bytes) meets now and
  // waits for them on the host, for a range phosd itself reads; Ok at once when nothing loads.
  Status RequireResident(uint64_t ptr, uint64_t bytes);

  // Whether the session may make one more stream, event, cuBLAS handle or communicator (logged
  // when not).
  bool HandleRoom(const char* what);
  // Rejects (and logs) a range this session does not own.
  bool Owns(uint64_t ptr, uint64_t bytes, const char* what);
  Result<CUstream> StreamOf(uint64_t vid) const;
  // The session device of the stream, event or cuBLAS handle `vid`; -1 when it names none.
  int HandleDevice(uint64_t vid) const;
  // Device memory for cudaMalloc / cudaFree: from the instance address space of the record's
  // device when it has one, else cuMemAlloc / cuMemFree. What is freed is zeroed first (the
  // driver may give it to another tenant's allocation in this process as it is), after the
  // device's work, as cudaFree synchronises.
  CUresult AllocateBuffer(uint64_t bytes, CUdeviceptr* out);
  CUresult FreeBuffer(CUdeviceptr base, uint64_t bytes);
  // The session's address space holding `address` (any device), or null.
  InstanceAddressSpace* SpaceOf(uint64_t address) const;
  // Frees the borrowed ranges now (their slot goes to the next instance at once): zeroed and
  // unmapped, or as range_release_ says, unmapped with the memory handed to the pool's scrub.
  void ScrubBorrowedSpaces();

  // session_devices.cc: which context a record runs in, and the per-device state behind it.
  CUresult Route(const ipc::RecordView& record);
  // The node device of session device `device`; -1 when the node has no such device.
  int PhysicalDevice(int device) const;
  Result<CUcontext> ContextOn(int device);
  // The context of session device `peer` for a peer-access call of the record's device, whose
  // context is current again on return (creating the peer's context makes it current).
  Result<CUcontext> PeerContext(int peer);
  // Disables the peer access the function enabled from `device` (any device: -1) or to it; at
  // the end of the session every one, before the contexts go back.
  CUresult DisablePeers(int device);
  // The module in the context of session device `device` (loading it there first), and the
  // kernel there.
  CUresult ModuleOn(Module& m, int device, CUmodule* out);
  CUresult FunctionOn(Function& fn, int device, CUfunction* out);
  void ReleaseDevices();
  // Hands everything the session made, on every device, to the group's scrub (tenant(d)).
  void ReleaseToGroup();
  // session_nccl.cc
  // Communicators over session `devices` (rank i on devices[i]) from the group's: its own ranks
  // when the devices are the whole group in order, else a split of it (owned).
  Status GroupComms(const std::vector<int>& devices, std::vector<uint64_t>* vids);
  // A clique id for a communicator the session makes.
  uint64_t NewClique() { return ++last_clique_; }
  // The clique's bookkeeping, sized for `nranks` ranks.
  NcclClique& CliqueOf(uint64_t clique, int nranks);
  // Aborting a rank still being created gives up its creation (NcclAbort).
  void AbandonCreation(uint64_t vid);
  // Whether rank `rank` of `clique` entered a collective a rank of it has not: such a rank waits
  // for the others, which only later records of this session can bring.
  bool HalfEntered(uint64_t clique, int rank) const;
  // Destroys the reductions the function made on a rank of the group's communicator, which
  // outlives the session in the pool.
  void DestroyRedOps(NcclComm& comm);
  // Aborts every rank of `clique` (the group's: every rank of the group's communicator, made anew
  // after the session) and marks the function's ranks of it lost, answering `lost_error`.
  void AbortClique(uint64_t clique, ncclResult_t lost_error);
  // Aborts every communicator with a collective left half-entered (its ranks that entered wait for
  // the others for ever; AbortClique, ncclSystemError). Returns how many it aborted. Under
  // watch_'s lock (collective_watch.h).
  int AbortHalfEntered(const char* why);
  // Aborts what a function may have left half-entered, then waits for the group's contexts.
  void ReleaseNccl();
  // session_nccl_collectives.cc
  // Runs the calls queued since the outermost ncclGroupStart inside one driver group, unless the
  // group must be refused whole: a call of it was refused, a communicator it names is gone, or a
  // send and a receive do not match (ncclInvalidUsage, nothing runs).
  ncclResult_t NcclFlushGroup();
  // Why `q` cannot run now (a communicator it needs was destroyed, finalized or lost, or a buffer it
  // names freed, since it was queued), or "".
  std::string NcclQueuedProblem(const NcclQueued& q) const;
  // The first reason to refuse `queued` whole, or "": a call that cannot run, or a send and a
  // receive that do not match (by communicator, peer and order of issue; count and datatype).
  std::string NcclGroupProblem(const std::vector<NcclQueued>& queued) const;
  // A call of the group being queued was refused: the whole group is (NCCL discards a group with
  // an error).
  void PoisonGroup(ncclResult_t result) {
    if (nccl_group_depth_ > 0 && nccl_group_error_ == ncclSuccess) nccl_group_error_ = result;
  }
  // Queues `q` in the open group; false (the group refused) past kMaxQueuedNcclCalls.
  bool QueueNccl(NcclQueued q, const char* what);
  // A collective was enqueued on `comm`: counted by rank in its clique.
  void CountCollective(const NcclComm& comm);
  uint64_t NewHandle() { return next_handle_ += 16; }

  driver::DriverTable* driver_;
  const SessionRules rules_;
  std::unique_ptr<ipc::Ring> ring_;
  std::string token_;
  int control_fd_;
  int pid_;
  CUcontext context_ = nullptr;
  std::optional<ctxpool::ContextLease> lease_;           // single-GPU sessions
  ctxpool::CommunicatorPool* groups_ = nullptr;           // group sessions: the pool, and
  std::optional<ctxpool::DeviceGroupLease> group_;        // the group once leased
  Status open_status_;                                    // why the group lease failed
  // The virtual id under which the lease's cuBLAS handle serves the session's first cublasCreate
  // (0: not handed out).
  uint64_t pooled_blas_vid_ = 0;
  std::atomic<bool> stop_{false};
  RangeRelease range_release_ = RangeRelease::kZeroed;
  // Host functions (host_fn_gates.h): all gates opened before the executor is joined, closed by
  // ReleaseAll.
  const std::shared_ptr<HostFnGates> host_fns_;
  // Collectives left half-entered while the executor waits (collective_watch.h); armed once the
  // session has a device group.
  CollectiveWatch watch_;
  std::thread executor_;

  // Restored sessions (session_restore.cc).
  std::shared_ptr<RestoreState> restore_;
  ParamMetadataCache* metadata_ = nullptr;
  std::vector<RestoreState::DeviceLoader> loaders_;  // by session device
  uint64_t shared_bytes_ = 0;  // snapshot bytes mapped from shared read-only allocations (no loader)
  // Some of the session's buffers are mapped read-only from shared allocations (or will be once
  // loaded): an illegal address may be a write speculation missed (OnSharedBufferFault).
  bool maps_shared_ = false;
  bool shared_fault_seen_ = false;
  // Buffers still mapped (or to be mapped) from shared allocations: a call whose speculated write
  // set names one gets a private copy first (CopySharedOnWrite), so the gate stays on while any is.
  std::map<uint64_t, RestoreState::Prepared::SharedBuffer> shared_buffers_;
  ctxpool::ModulesByHash preloaded_modules_;  // by content hash, until used
  // The function whose modules the session's context keeps loaded when the session ends (for its
  // next instance's restore): the restored snapshot's, or the one the session was captured as.
  std::string modules_owner_;
  std::atomic<bool> loaders_published_{false};     // Timeline() on other threads may read loaders_
  bool gating_ = false;    // restored: until launched, resident and done learning
  bool launched_ = false;  // the first kernel or cuBLAS call was seen
  AccessSets gate_sets_;
  std::mutex task_mu_;
  std::function<void()> task_;
  // A soft capture in progress (or finished, not yet released): the executor's to set and clear.
  std::shared_ptr<SoftCapture> soft_;

  // Owned by the executor thread while it runs.
  BufferTable buffers_;
  // The instance address space (single-GPU sessions with va_bytes_ > 0), reserved on first use,
  // or device 0's share of a deployed function's instance range; the other devices' shares.
  uint64_t va_bytes_ = 0;
  std::unique_ptr<InstanceAddressSpace> space_;
  std::map<int, std::unique_ptr<InstanceAddressSpace>> device_spaces_;  // session device >= 1
  // Virtual ids are multiples of 16 from 16 on: never 0 (the default stream), 1 or 2
  // (cudaStreamLegacy, cudaStreamPerThread).
  uint64_t next_handle_ = 0;
  std::unordered_map<uint64_t, StreamHandle> streams_;
  std::unordered_map<uint64_t, EventHandle> events_;
  std::unordered_map<uint64_t, BlasHandle> blas_;
  BlasPointerArrays blas_arrays_;  // the last pointer-array batch's, reused
  struct BlasScratch {
    CUcontext context = nullptr;
    CUdeviceptr ptr = 0;
    uint64_t bytes = 0;
  };
  std::unordered_map<int, BlasScratch> blas_scratch_;  // by session device
  struct BlasLtContextHandle {
    CUcontext context = nullptr;
    cublasLtHandle_t handle = nullptr;
  };
  std::unordered_map<int, BlasLtContextHandle> blas_lt_;  // by session device
  std::unordered_map<uint64_t, Module> modules_;
  std::vector<uint64_t> module_order_;
  std::unordered_map<uint64_t, Function> functions_;
  uint64_t module_bytes_ = 0;
  // The module globals the session resolved, on every device: memory its calls may name as they
  // name its buffers (copies, memsets, kernel parameters, cuBLAS operands), which it neither
  // allocated nor frees (docs/remoting.md, "Kernels").
  BufferTable globals_;

  // Devices (session_devices.cc).
  int base_device_ = 0;
  int device_count_ = 1;
  int device_ = 0;        // the session's current device (kSetDevice)
  int route_device_ = 0;  // the device the record being executed runs on
  std::unordered_map<int, CUcontext> device_contexts_;  // session device >= 1 -> its context
  std::unordered_map<uint64_t, int> buffer_devices_;    // buffer base -> device (>= 1)
  // Peer access the function enabled, (device, peer) -> whether this session enabled it in the
  // driver (false: it was already, by the device group's communicator, and stays so).
  std::map<std::pair<int, int>, bool> peers_;

  // NCCL (session_nccl.cc, session_nccl_collectives.cc).
  std::unordered_map<uint64_t, NcclComm> comms_;
  std::unordered_map<std::string, NcclRendezvous> rendezvous_;
  std::unordered_map<uint64_t, NcclClique> cliques_;
  uint64_t last_clique_ = kGroupClique;
  int nccl_group_depth_ = 0;
  ncclResult_t nccl_group_error_ = ncclSuccess;  // a call of the open group was refused
  std::vector<NcclQueued> nccl_queued_;

  // CUDA graphs and stream capture (session_graphs.cc, session_capture.cc).
  std::unordered_map<uint64_t, GraphRecord> graphs_;
  std::unordered_map<uint64_t, GraphExecRecord> graph_execs_;
  std::unordered_map<uint64_t, CaptureRecord> captures_;        // by capture id
  std::unordered_map<uint64_t, CapturingStream> capturing_;     // by virtual stream
  std::unordered_map<uint64_t, CapturingStream> captured_events_;  // events recorded in a capture
  uint64_t last_capture_ = 0;
};

}  // namespace phos::runtime
