// A session's snapshot side (docs/design.md D5, D7, D8): adopting a prepared restore, gating each call on
// the buffers it may touch while the loader runs, and capturing the session at deploy.
#include <fmt/core.h>
#include <sys/socket.h>

#include <csignal>
#include <cstring>
#include <future>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/ipc/nccl_types.h"
#include "phos/runtime/snapshot_capture.h"
#include "phos/store/store.h"
#include "restore_state.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::Op;

}  // namespace

Result<std::unique_ptr<Session>> Session::OpenRestored(driver::DriverTable* driver, std::shared_ptr<RestoreState> restore,
                                                       ParamMetadataCache* metadata, uint64_t va_bytes,
                                                       std::unique_ptr<ipc::Ring> ring, std::string token,
                                                       int control_fd, int pid, SessionRules rules) {
  if (restore == nullptr || metadata == nullptr) return Status::InvalidArgument("restored session without its restore");
  int device_count = restore->plan().gpus;  // a group's devices
  if (device_count <= 1) {
    PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&device_count));
  }
  // Every check before the session exists: a factory that fails leaves control_fd to the caller.
  std::unique_ptr<Session> s(new Session(driver, std::move(ring), std::move(token), control_fd, pid, std::move(rules)));
  s->base_device_ = restore->device();  // the session's device 0
  s->va_bytes_ = va_bytes;
  s->metadata_ = metadata;
  s->device_count_ = device_count;
  restore->MarkConnected();
  s->restore_ = std::move(restore);
  s->executor_ = std::thread([raw = s.get()] { raw->Run(); });
  PHOS_LOG(Info, "restore", "session for pid {} opened from a restore", pid);
  return s;
}

Status Session::AdoptRestore() {
  // A stop-the-world restore of a large snapshot on a slow profile takes a while; the frontend's
  // first call waits for it (that is what stop-the-world means).
  Status prepared;
  do {
    prepared = restore_->Wait(std::chrono::milliseconds(200));
  } while (prepared.code() == StatusCode::kTimeout && !stop_.load());
  if (prepared.code() == StatusCode::kTimeout) return Status::Unavailable("the session ended before its restore was prepared");
  PHOS_RETURN_IF_ERROR(prepared);
  RestoreState::Prepared p = restore_->Take();
  // The NCCL state below is the watch's (collective_watch.h): the session's end may look at it.
  std::unique_lock nccl = watch_.Lock();
  if (p.group) {
    group_.emplace(std::move(*p.group));
    context_ = group_->context(0);
  } else if (p.lease) {
    context_ = p.lease->context();
    lease_.emplace(std::move(*p.lease));
  } else {
    return Status::Internal("restore prepared without a context");
  }
  for (auto& [device, space] : p.spaces) {
    if (device == 0) {
      space_ = std::move(space);
    } else {
      device_spaces_[device] = std::move(space);
    }
  }
  for (const auto& b : p.buffers) {
    PHOS_RETURN_IF_ERROR(buffers_.Insert(b.base, b.bytes));
    if (b.device != 0) buffer_devices_[b.base] = b.device;
  }
  auto device_of = [&p](uint64_t vid) {
    auto it = p.handle_devices.find(vid);
    return it == p.handle_devices.end() ? 0 : it->second;
  };
  // A snapshot's communicators are ranks of the group's own (splits are not captured): rank d on
  // device d.
  for (const auto& [vid, comm] : p.comms) {
    comms_[vid] = NcclComm{.comm = comm.first, .device = comm.second, .clique = kGroupClique, .rank = comm.second,
                           .nranks = group_ ? group_->size() : 1};
  }
  if (group_) CliqueOf(kGroupClique, group_->size());
  nccl.unlock();
  if (group_) watch_.Arm();
  for (const auto& [vid, stream] : p.streams) {
    streams_[vid] = StreamHandle{stream, p.stream_flags[vid], device_of(vid), p.stream_priorities[vid]};
  }
  for (const auto& [vid, event] : p.events) events_[vid] = EventHandle{event, p.event_flags[vid], device_of(vid)};
  for (const auto& [vid, handle] : p.blas) blas_[vid] = BlasHandle{handle, device_of(vid)};
  if (restore_->plan().manifest != nullptr) AdoptGraphs(restore_->plan().manifest->graphs);
  pooled_blas_vid_ = p.pooled_blas_vid;
  next_handle_ = std::max(next_handle_, p.next_handle);
  preloaded_modules_ = std::move(p.modules);
  modules_owner_ = restore_->function();
  loaders_ = std::move(p.loaders);
  shared_bytes_ = p.shared_bytes;
  maps_shared_ = !p.shared.empty() || !p.publish.empty();
  shared_buffers_ = std::move(p.shared_by_address);
  loaders_published_.store(true, std::memory_order_release);
  gating_ = true;  // until the first launch is noted and nothing is left to load or learn
  return Status::Ok();
}

Session::Speculation Session::Speculate(const ipc::RecordView& record, AccessSets* sets, CUstream* stream) {
  switch (static_cast<Op>(record.header.opcode)) {
    case Op::kLaunch:
    case Op::kLaunchEx: {
      // A launch with attributes reads and writes what the same launch without them does: its
      // parameters follow the attributes.
      ipc::LaunchArgs a;
      size_t params_at = sizeof(a);
      if (static_cast<Op>(record.header.opcode) == Op::kLaunchEx) {
        ipc::LaunchExArgs ex;
        if (!DecodeRecord(record, &ex) || ex.attribute_count > ipc::kMaxLaunchAttributes) return Speculation::kNone;
        a = ex.launch;
        params_at = sizeof(ex) + ex.attribute_count * sizeof(ipc::LaunchAttribute);
      } else if (!DecodeRecord(record, &a)) {
        return Speculation::kNone;
      }
      auto it = functions_.find(a.function);
      if (it == functions_.end()) return Speculation::kNone;
      if (record.header.length < params_at || record.header.length - params_at < a.param_bytes) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      // A kernel whose parameters are not known, or not understood, runs all the same.
      if (it->second.meta == nullptr) return Speculation::kUnknown;
      std::span<const uint8_t> params(record.payload + params_at, a.param_bytes);
      return SpeculateLaunch(*it->second.meta, params, buffers_, sets).ok() ? Speculation::kSets
                                                                             : Speculation::kUnknown;
    }
    case Op::kMemcpyHtoD:
    case Op::kMemcpyDtoH:
    case Op::kMemcpyDtoD: {
      ipc::CopyArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      Op op = static_cast<Op>(record.header.opcode);
      uint64_t dst = op == Op::kMemcpyDtoH ? kHostSide : a.dst;
      uint64_t src = op == Op::kMemcpyHtoD ? kHostSide : a.src;
      SpeculateCopy(buffers_, dst, src, a.bytes, sets);
      return Speculation::kSets;
    }
    case Op::kMemcpy2D: {
      ipc::Copy2DArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      const auto kind = static_cast<ipc::Copy2DKind>(a.kind);
      uint64_t src = kind == ipc::Copy2DKind::kHostToDevice ? kHostSide : a.src;
      uint64_t dst = kind == ipc::Copy2DKind::kDeviceToHost ? kHostSide : a.dst;
      SpeculatePitched(buffers_, src, a.src_pitch, a.width, a.height, /*write=*/false, sets);
      SpeculatePitched(buffers_, dst, a.dst_pitch, a.width, a.height, /*write=*/true, sets);
      return Speculation::kSets;
    }
    case Op::kMemset2D: {
      ipc::Memset2DArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      SpeculatePitched(buffers_, a.dst, a.pitch, a.width, a.height, /*write=*/true, sets);
      return Speculation::kSets;
    }
    case Op::kMemset: {
      ipc::MemsetArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      SpeculateMemset(buffers_, a.dst, a.bytes, sets);
      return Speculation::kSets;
    }
    case Op::kBlasGemm:
    case Op::kBlasLevel1:
    case Op::kBlasLevel2:
    case Op::kBlasLevel3:
      return SpeculateBlasCall(record, sets, stream);
    case Op::kBlasLtMatmul: {
      // A, B, C (unless beta is 0) and the bias read; D and the workspace written.
      ipc::BlasLtMatmulArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      const BlasOperands ops = LtMatmulOperands(a);
      Result<CUstream> s = StreamOf(a.stream);
      if (!ops.ok() || !s.ok()) return Speculation::kNone;  // Execute refuses it
      *stream = *s;
      SpeculateBlas(buffers_, ops, sets);
      return Speculation::kSets;
    }
    case Op::kGraphLaunch: {
      // The union of the executable graph's nodes' sets: its launch waits for every buffer a node
      // names, as each node's call would.
      ipc::StreamEventArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      auto exec = graph_execs_.find(a.event);
      Result<CUstream> s = StreamOf(a.stream);
      if (exec == graph_execs_.end() || !s.ok()) return Speculation::kNone;
      *stream = *s;
      // A graph restored from the snapshot names its kernels by name until first used.
      if (ResolveGraphKernels(exec->second.nodes) != CUDA_SUCCESS) return Speculation::kNone;
      // Node by node into the same sets: speculation allocates nothing.
      for (const GraphNodeRecord& n : exec->second.nodes) {
        if (!n.live) continue;
        GraphNodeAccess access{.node = &n.params, .params = n.kernel_params};
        if (n.params.type == CU_GRAPH_NODE_TYPE_KERNEL) {
          auto fn = functions_.find(n.params.launch.function);
          if (fn == functions_.end()) return Speculation::kNone;  // refused by the launch's checks
          access.meta = fn->second.meta.get();
        }
        if (!SpeculateGraphLaunch({&access, 1}, buffers_, sets).ok()) return Speculation::kUnknown;
      }
      return Speculation::kSets;
    }
    case Op::kNcclCollective: {
      // The send buffer is read, the receive buffer written (and read where not covered), a
      // pre-multiplied sum's device scalar read: what this rank of the communicator touches.
      ipc::NcclCollectiveArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      auto comm = comms_.find(a.comm);
      Result<CUstream> s = StreamOf(a.stream);
      if (comm == comms_.end() || comm->second.comm == nullptr || !s.ok()) return Speculation::kNone;
      *stream = *s;
      const uint64_t elem = ipc::NcclTypeBytes(a.datatype);
      NcclOperands operands = NcclCollectiveOperands(a, elem, comm->second.nranks, comm->second.rank);
      if (auto op = comm->second.ops.find(a.op); op != comm->second.ops.end() && op->second.device_scalar != 0) {
        operands.scalar = {op->second.device_scalar, elem, true};
      }
      SpeculateNccl(buffers_, operands, sets);
      return Speculation::kSets;
    }
    case Op::kNcclSend:
    case Op::kNcclRecv: {
      ipc::NcclP2pArgs a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      Result<CUstream> s = StreamOf(a.stream);
      if (!s.ok()) return Speculation::kNone;
      *stream = *s;
      const bool send = static_cast<Op>(record.header.opcode) == Op::kNcclSend;
      SpeculateNccl(buffers_, NcclPointToPointOperands(a, send, ipc::NcclTypeBytes(a.datatype)), sets);
      return Speculation::kSets;
    }
    default:
      return Speculation::kNone;
  }
}

Session::Speculation Session::SpeculateBlasCall(const ipc::RecordView& record, AccessSets* sets, CUstream* stream) {
  uint64_t handle = 0;
  BlasOperands ops;
  ipc::GemmArgs gemm{};
  switch (static_cast<Op>(record.header.opcode)) {
    case Op::kBlasGemm:
      if (!DecodeRecord(record, &gemm)) return Speculation::kNone;
      handle = gemm.handle;
      ops = GemmOperands(gemm);
      break;
    case Op::kBlasLevel1: {
      ipc::BlasLevel1Args a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      handle = a.handle;
      ops = Level1Operands(a);
      break;
    }
    case Op::kBlasLevel2: {
      ipc::BlasLevel2Args a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      handle = a.handle;
      ops = Level2Operands(a);
      break;
    }
    case Op::kBlasLevel3: {
      ipc::BlasLevel3Args a;
      if (!DecodeRecord(record, &a)) return Speculation::kNone;
      handle = a.handle;
      ops = Level3Operands(a);
      break;
    }
    default:
      return Speculation::kNone;
  }
  auto it = blas_.find(handle);
  if (it == blas_.end() || !ops.ok()) return Speculation::kNone;  // Execute refuses it
  cudaStream_t s = nullptr;
  if (driver_->cublasGetStream(it->second.handle, &s) != CUBLAS_STATUS_SUCCESS) return Speculation::kNone;
  *stream = reinterpret_cast<CUstream>(s);
  const bool pointer_batch = static_cast<Op>(record.header.opcode) == Op::kBlasGemm &&
                             gemm.batch_kind == static_cast<int32_t>(ipc::BlasBatch::kPointers);
  if (!pointer_batch || ops.operands().empty()) {
    SpeculateBlas(buffers_, ops, sets);
    return Speculation::kSets;
  }
  // The matrices are where the arrays say: the arrays are read (their buffers loaded first), and
  // only arrays inside the session's buffers (Execute refuses any other).
  for (const BlasOperand& op : ops.operands()) {
    if (!buffers_.Contains(op.range.ptr, op.range.bytes)) return Speculation::kNone;
  }
  if (Status read = ReadGemmPointerArrays(gemm, &blas_arrays_); !read.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "restore", 1, "pid {}: pointer arrays unreadable for speculation: {}", pid_, read.message());
    return Speculation::kUnknown;
  }
  SpeculateGemmBatch(buffers_, gemm, blas_arrays_.a, blas_arrays_.b, blas_arrays_.c, sets);
  return Speculation::kSets;
}

Status Session::RequireResident(uint64_t ptr, uint64_t bytes) {
  if (loaders_.empty() || bytes == 0) return Status::Ok();
  AccessSets touched;
  SpeculateCopy(buffers_, kHostSide, ptr, bytes, &touched);
  for (const BufferRef& b : touched.read.buffers()) {
    for (RestoreState::DeviceLoader& dl : loaders_) {
      const int index = dl.loader->Find(b.base);
      if (index < 0) continue;
      PHOS_ASSIGN_OR_RETURN(CUevent ready, dl.loader->Require(index));
      if (ready != nullptr) PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuEventSynchronize(ready));
      break;
    }
  }
  return Status::Ok();
}

CUresult Session::Gate(const ipc::RecordView& record) {
  Op op = static_cast<Op>(record.header.opcode);
  if (!launched_ && (op == Op::kLaunch || op == Op::kLaunchEx || op == Op::kBlasGemm || op == Op::kBlasLevel1 ||
                     op == Op::kBlasLevel2 || op == Op::kBlasLevel3 || op == Op::kBlasLtMatmul)) {
    restore_->MarkFirstLaunch();
    launched_ = true;
  }
  bool resident = true;
  for (const auto& dl : loaders_) resident = resident && dl.loader->all_resident();
  bool learning = restore_->learning();
  if (resident && !learning && launched_ && shared_buffers_.empty()) {
    gating_ = false;  // the single flag: no call is examined again
    return CUDA_SUCCESS;
  }
  gate_sets_.Clear();
  CUstream stream = nullptr;
  if (loaders_.empty() || (resident && !learning && shared_buffers_.empty())) return CUDA_SUCCESS;
  const Speculation speculation = Speculate(record, &gate_sets_, &stream);
  if (speculation == Speculation::kNone) return CUDA_SUCCESS;
  if (speculation == Speculation::kUnknown) {
    // A call that cannot be analysed may write anything: every shared buffer is copied first,
    // and a learning restore counts every buffer written (none of them is known read-only).
    if (!shared_buffers_.empty()) {
      if (CUresult r = CopySharedOnWrite(/*all=*/true); r != CUDA_SUCCESS) return r;
    }
    if (learning) restore_->NoteEveryBufferWritten();
    return CUDA_SUCCESS;
  }
  if (!shared_buffers_.empty()) {
    if (CUresult r = CopySharedOnWrite(/*all=*/!gate_sets_.complete()); r != CUDA_SUCCESS) return r;
  }
  if (resident && !learning) return CUDA_SUCCESS;
  auto require = [&](uint64_t base, bool written) -> CUresult {
    // The loader of the device whose memory it is.
    for (RestoreState::DeviceLoader& dl : loaders_) {
      int index = dl.loader->Find(base);
      if (index < 0) continue;
      if (learning) restore_->NoteTouch(dl.global[index], written);
      if (resident) return CUDA_SUCCESS;
      Result<CUevent> ready = dl.loader->Require(index);
      if (!ready.ok()) {
        PHOS_LOG_EVERY_SEC(Error, "restore", 1, "pid {}: {}", pid_, ready.status().message());
        return CUDA_ERROR_ILLEGAL_STATE;
      }
      return *ready == nullptr ? CUDA_SUCCESS : driver_->cuStreamWaitEvent(stream, *ready, 0);
    }
    return CUDA_SUCCESS;  // a buffer the function allocated after its restore
  };
  if (!gate_sets_.complete()) {
    // More buffers than the sets hold: the call may touch, and write, any of them.
    for (const auto& [base, bytes] : buffers_.buffers()) {
      if (CUresult r = require(base, true); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  }
  for (const BufferSet* set : {&gate_sets_.read, &gate_sets_.write}) {
    const bool written = set == &gate_sets_.write;
    for (const BufferRef& b : set->buffers()) {
      if (CUresult r = require(b.base, written); r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult Session::CopySharedOnWrite(bool all) {
  std::vector<uint64_t> written;
  if (all) {
    for (const auto& [base, sb] : shared_buffers_) written.push_back(base);
  } else {
    for (const BufferRef& b : gate_sets_.write.buffers()) {
      if (shared_buffers_.count(b.base) != 0) written.push_back(b.base);
    }
  }
  SharedBuffers* shares = restore_->shares();
  for (uint64_t base : written) {
    auto it = shared_buffers_.find(base);
    const RestoreState::Prepared::SharedBuffer sb = std::move(it->second);
    shared_buffers_.erase(it);
    InstanceAddressSpace* space = SpaceOf(base);
    if (space == nullptr || shares == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    if (sb.publish != nullptr) {
      std::lock_guard lock(sb.publish->mu);
      if (!sb.publish->published) {
        // Still loading here (or withdrawn already), handed to nobody: it simply stays this
        // session's. Withdrawn once only: the content may be another allocation's by now.
        if (!sb.publish->withdrawn) {
          sb.publish->withdrawn = true;
          shares->Withdraw(sb.physical, sb.content, sb.handle);
        }
        space->ForgetShare(base);
        continue;
      }
    }
    driver::ContextScope scope(*driver_, group_ ? group_->context(sb.device) : context_);
    Status s = space->MakePrivate(base);
    if (!s.ok()) {
      PHOS_LOG(Error, "restore", "pid {}: copy-on-write of shared buffer {:#x}: {}", pid_, base, s.message());
      return CUDA_ERROR_ILLEGAL_STATE;
    }
    shares->CountPrivateCopy();
    PHOS_LOG(Info, "restore", "pid {}: a call writes shared read-only buffer {:#x}: private copy made first",
             pid_, base);
  }
  return CUDA_SUCCESS;
}

void Session::OnSharedBufferFault() {
  if (shared_fault_seen_ || restore_ == nullptr || restore_->shares() == nullptr) return;
  shared_fault_seen_ = true;
  const std::string& function = restore_->plan().manifest->function;
  restore_->shares()->Disable(function);
  PHOS_LOG(Error, "restore",
           "pid {} ({}): illegal address with read-only buffers mapped from shared allocations; "
           "the instance is lost",
           pid_, function);
  // The process on the other end of the control socket, as the kernel knows it (the pid the
  // hello names is the function's word, not to be acted on).
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(control_fd_, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0)
    kill(peer.pid, SIGKILL);
}

SessionTimeline Session::Timeline() const {
  SessionTimeline t;
  if (restore_ == nullptr) return t;
  RestoreState::Times times = restore_->times();
  t.restored = restore_->plan().manifest != nullptr;
  t.issued = times.issued;
  t.leased = times.leased;
  t.pool_wait = times.pool_wait;
  t.prepared = times.prepared;
  t.connected = times.connected;
  t.first_launch = times.first_launch;
  t.modules_loaded = restore_->modules_loaded();
  if (loaders_published_.load(std::memory_order_acquire)) {
    bool all = !loaders_.empty();
    double last_ms = 0;
    for (const RestoreState::DeviceLoader& dl : loaders_) {
      RestoreLoaderStats stats = dl.loader->Stats();
      t.required += stats.required;
      t.misses += stats.misses;
      t.loaded_bytes += stats.bytes;
      for (const store::Buffer& b : dl.manifest->buffers) t.snapshot_bytes += b.size;
      all = all && stats.all_resident;
      last_ms = std::max(last_ms, stats.fully_resident_ms);
    }
    // Shared read-only buffers are resident from the start, and were not copied.
    t.shared_bytes = shared_bytes_;
    t.loaded_bytes += shared_bytes_;
    t.snapshot_bytes += shared_bytes_;
    if (all) {
      t.resident = times.loading + std::chrono::duration_cast<SessionTimeline::Clock::duration>(
                                      std::chrono::duration<double, std::milli>(last_ms));
    }
  }
  return t;
}

bool Session::TaskPending() {
  std::lock_guard lock(task_mu_);
  return task_ != nullptr;
}

void Session::RunPendingTask() {
  std::function<void()> task;
  {
    std::lock_guard lock(task_mu_);
    task.swap(task_);
  }
  if (task) task();
}

Status Session::RunOnExecutor(std::function<void()> task, std::chrono::milliseconds timeout, const char* what) {
  auto ran = std::make_shared<std::promise<void>>();
  std::future<void> done = ran->get_future();
  {
    std::lock_guard lock(task_mu_);
    if (task_) return Status::FailedPrecondition("a capture of this session is already under way");
    task_ = [task = std::move(task), ran] {
      task();
      ran->set_value();
    };
  }
  // An idle executor sleeps in WaitForWork until a record comes: the capture's stall must not
  // last the rest of that sleep.
  ring_->WakeServer();
  if (done.wait_for(timeout) != std::future_status::ready) {
    std::lock_guard lock(task_mu_);
    if (task_) {
      task_ = nullptr;
      return Status::Timeout(fmt::format("{} within {} ms", what, timeout.count()));
    }
    // Taken by the executor: it finishes with what the task refers to before we may return.
  }
  done.wait();
  return Status::Ok();
}

Result<uint64_t> Session::Capture(store::Store& store, const std::string& function, const std::string& device_profile,
                                  std::chrono::milliseconds timeout, const CaptureOptions& options) {
  // Stop-the-world: the executor captures, between two calls. Soft: the executor takes the point
  // and describes the session, and this thread copies while the executor runs on.
  const CheckpointMode mode = options.mode;
  if (mode == CheckpointMode::kStopTheWorld) {
    Result<uint64_t> version = Status::Internal("the capture did not run");
    PHOS_RETURN_IF_ERROR(RunOnExecutor([&] { version = CaptureNow(store, function, device_profile); }, timeout,
                                       "the function's calls did not drain"));
    return version;
  }
  Result<SoftBegun> soft = Status::Internal("the capture did not begin");
  PHOS_RETURN_IF_ERROR(RunOnExecutor(
      [&] { soft = BeginSoftCapture(function, device_profile, mode == CheckpointMode::kSoftRecopy); }, timeout,
      "the function's calls did not drain"));
  if (!soft.ok()) return soft.status();
  const std::shared_ptr<SoftCapture>& capture = soft->capture;
  if (options.at_point) options.at_point();
  Result<uint64_t> version = Status::Internal("the capture did not end");
  if (mode == CheckpointMode::kSoftCow) {
    version = CaptureGpuState(soft->request, store);
  } else {
    // Soft recopy: every buffer copied while the calls run, then the ones written meanwhile again
    // in the final stop, which ends before the commit.
    Result<Precopy> ahead = PrecopyBuffers(soft->request, store);
    Status stopped = ahead.status();
    if (stopped.ok() && options.final_stop) stopped = options.final_stop();
    if (stopped.ok()) {
      Result<std::unique_ptr<store::SnapshotWriter>> written = Status::Internal("the final stop did not run");
      Status ran = RunOnExecutor([&] { written = FinishSoftRecopy(store, function, device_profile, *ahead); },
                                 timeout, "the final stop of a soft recopy was not taken");
      if (options.resumed) options.resumed();
      version = !ran.ok() ? Result<uint64_t>(ran)
                : written.ok() ? CommitCapture(std::move(*written), store, function)
                               : Result<uint64_t>(written.status());
      if (version.ok() && options.committed) {
        CaptureStats copies;
        {
          std::lock_guard lock(capture->mu);
          copies = capture->stats;  // final: nothing is copied after the final stop
        }
        options.committed(*version, copies);
      }
      // Off the instance's time, and after the commit a migration's final stop waits for: lifting
      // the guards of a large session takes a while (simgpu), paced for the calls still to come.
      // A session that ends leaves them to its end, which unmaps its ranges (ReleaseSoftCapture).
      if (!options.session_ends) {
        UnguardSoftCapture(*driver_, *capture, /*pace=*/true);
      } else {
        std::lock_guard lock(capture->mu);
        capture->lift_on_fault = true;
      }
    } else {
      version = stopped;
    }
  }
  CaptureStats stats;
  {
    std::lock_guard lock(capture->mu);
    capture->finished = true;  // the executor releases the rest at its next call or the session's end
    stats = capture->stats;
  }
  if (options.stats != nullptr) *options.stats = stats;
  if (mode == CheckpointMode::kSoftCow) {
    PHOS_LOG(Info, "capture",
             "pid {}: soft copy-on-write capture of {} {}: {} buffers copied before a call wrote them, {} before a "
             "write speculation missed",
             pid_, function, version.ok() ? fmt::format("v{}", *version) : "failed", stats.copied_before_write,
             stats.missed_writes);
  } else {
    PHOS_LOG(Info, "capture",
             "pid {}: soft recopy capture of {} {}: {} buffers ({} bytes) copied again in the final stop, {} of them "
             "written where speculation did not expect",
             pid_, function, version.ok() ? fmt::format("v{}", *version) : "failed", stats.recopied,
             stats.recopied_bytes, stats.missed_writes);
  }
  return version;
}

Result<uint64_t> Session::CaptureNow(store::Store& store, const std::string& function, const std::string& device_profile) {
  PHOS_ASSIGN_OR_RETURN(CaptureRequest req, DescribeForCapture(function, device_profile));
  Result<uint64_t> version = CaptureGpuState(req, store);
  // The function's restores need the images just captured: its context keeps them loaded.
  if (version.ok()) modules_owner_ = function;
  return version;
}

Result<CaptureRequest> Session::DescribeForCapture(const std::string& function, const std::string& device_profile) {
  if (!device_contexts_.empty()) {
    return Status::FailedPrecondition(
        "the function used devices beyond its first without declaring them (deploy it with --gpus N)");
  }
  if (!open_status_.ok()) return open_status_;
  // A restored session (a checkpoint of a running instance) is captured whole: what its loader has
  // not brought in yet is loaded first.
  for (RestoreState::DeviceLoader& dl : loaders_) {
    PHOS_RETURN_IF_ERROR(dl.loader->Wait().WithContext("load the rest of the restored snapshot before the capture"));
  }
  if (host_fns_->pending() != 0) {
    return Status::FailedPrecondition(fmt::format(
        "{} host functions are still pending: a snapshot cannot hold the function process's side of them",
        host_fns_->pending()));
  }
  for (const auto& [vid, comm] : comms_) {
    if (comm.owned) return Status::FailedPrecondition("snapshots of split NCCL communicators are not supported yet");
  }
  if (group_) {
    // Every device quiet before any byte is read (CaptureGpuState synchronises device 0's).
    for (int d = 0; d < group_->size(); ++d) {
      driver::ContextScope scope(*driver_, group_->context(d));
      PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuCtxSynchronize());
    }
  }
  auto buffer_device = [this](uint64_t base) {
    auto it = buffer_devices_.find(base);
    return it == buffer_devices_.end() ? 0 : it->second;
  };
  CaptureRequest req{.driver = driver_, .context = context_, .function = function, .device_profile = device_profile};
  int index = 0;
  for (const auto& [base, bytes] : buffers_.buffers()) {
    if (SpaceOf(base) == nullptr || !SpaceOf(base)->borrowed()) {
      return Status::FailedPrecondition(fmt::format("buffer {:#x} is not in the instance's range", base));
    }
    req.buffers.push_back({.address = base,
                           .size = bytes,
                           .label = fmt::format("buffer {}", index++),
                           .device = buffer_device(base)});
  }
  req.gpus = group_ ? group_->size() : 1;
  if (Status graphs = CaptureGraphs(&req.graphs); !graphs.ok()) return graphs;
  for (const auto& [vid, comm] : comms_) {
    req.nccl_comms.push_back({.handle = vid, .device = comm.device});
  }
  for (uint64_t id : module_order_) {
    const Module& m = modules_[id];
    if (m.image.empty()) continue;  // never completed: nothing the function can use
    CaptureModule& captured =
        req.modules.emplace_back(CaptureModule{.image = std::string(m.image.begin(), m.image.end()),
                                               .kind = m.is_fatbin ? "fatbin" : "simgpu"});
    for (const auto& [key, global] : m.globals) {
      if (key.first != 0) {
        return Status::FailedPrecondition(fmt::format(
            "module global '{}' was named on device {}: only device 0's module globals are captured", key.second,
            key.first));
      }
      captured.globals.push_back({.name = key.second, .address = global.address, .size = global.bytes});
    }
  }
  for (const auto& [vid, s] : streams_) {
    req.streams.push_back({.handle = vid, .flags = s.flags, .priority = s.priority, .device = s.device});
  }
  for (const auto& [vid, e] : events_) {
    req.events.push_back({.handle = vid, .flags = e.flags, .device = e.device});
  }
  // The pooled handle first: restore serves the first handle with its lease's pooled one.
  std::vector<uint64_t> blas_vids;
  if (pooled_blas_vid_ != 0) blas_vids.push_back(pooled_blas_vid_);
  for (const auto& [vid, h] : blas_) {
    if (vid != pooled_blas_vid_) blas_vids.push_back(vid);
  }
  for (uint64_t vid : blas_vids) {
    const BlasHandle& h = blas_[vid];
    cudaStream_t stream = nullptr;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    if (driver_->cublasGetStream(h.handle, &stream) != CUBLAS_STATUS_SUCCESS ||
        driver_->cublasGetMathMode(h.handle, &mode) != CUBLAS_STATUS_SUCCESS) {
      return Status::DeviceError(fmt::format("cuBLAS handle {}: settings unreadable", vid));
    }
    uint64_t stream_vid = 0;
    if (reinterpret_cast<CUstream>(stream) == CU_STREAM_PER_THREAD) stream_vid = 2;
    for (const auto& [svid, s] : streams_) {
      if (s.stream == reinterpret_cast<CUstream>(stream) && stream != nullptr) stream_vid = svid;
    }
    req.library_handles.push_back({.handle = vid,
                                   .library = "cublas",
                                   .stream = stream_vid,
                                   .math_mode = static_cast<uint32_t>(mode),
                                   .device = h.device});
  }
  if (space_ != nullptr && space_->borrowed()) {
    req.va_base = space_->base();  // device 0's share starts the instance range
    req.va_bytes = va_bytes_;
  }
  req.next_handle = next_handle_;
  return req;
}

}  // namespace phos::runtime
