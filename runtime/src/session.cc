#include "session.h"

#include <unistd.h>

#include <utility>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/store/chunk.h"

namespace phos::runtime {

Session::Session(driver::DriverTable* driver, std::unique_ptr<ipc::Ring> ring, std::string token, int control_fd, int pid,
                 SessionRules rules)
    : driver_(driver),
      rules_(std::move(rules)),
      ring_(std::move(ring)),
      token_(std::move(token)),
      control_fd_(control_fd),
      pid_(pid),
      host_fns_(HostFnGates::Create(driver_, ring_.get(), pid_)),
      watch_(rules_.collective_timeout, [this](const char* why) { return AbortHalfEntered(why); }) {}

Result<std::unique_ptr<Session>> Session::Open(driver::DriverTable* driver, ctxpool::ContextLease lease, int device,
                                               uint64_t va_bytes, std::unique_ptr<ipc::Ring> ring, std::string token,
                                               int control_fd, int pid, SessionRules rules) {
  // Every check before the session exists: a factory that fails leaves control_fd to the caller.
  int device_count = 0;
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&device_count));
  if (lease.device() != device) {
    return Status::InvalidArgument(fmt::format("session on device {} given a context of device {}", device, lease.device()));
  }
  std::unique_ptr<Session> s(new Session(driver, std::move(ring), std::move(token), control_fd, pid, std::move(rules)));
  s->base_device_ = device;
  s->va_bytes_ = va_bytes;
  s->device_count_ = device_count;
  // A pooled context (docs/design.md D11): created ahead of time, current on no thread; only the executor
  // thread makes it current.
  s->context_ = lease.context();
  s->lease_.emplace(std::move(lease));
  s->executor_ = std::thread([raw = s.get()] { raw->Run(); });
  PHOS_LOG(Info, "runtime", "session for pid {} opened", pid);
  return s;
}

Result<std::unique_ptr<Session>> Session::OpenWithGroup(driver::DriverTable* driver, ctxpool::CommunicatorPool* groups, int gpus,
                                                        std::unique_ptr<ipc::Ring> ring, std::string token,
                                                        int control_fd, int pid, SessionRules rules) {
  if (groups == nullptr) return Status::FailedPrecondition(fmt::format("a session of {} GPUs needs device groups (NCCL)", gpus));
  if (gpus < 2) return Status::InvalidArgument(fmt::format("a device group session needs at least 2 GPUs, not {}", gpus));
  std::unique_ptr<Session> s(new Session(driver, std::move(ring), std::move(token), control_fd, pid, std::move(rules)));
  s->groups_ = groups;
  s->device_count_ = gpus;
  // The lease may wait for the refill (tens of seconds on the a100 profile): on the executor, so
  // that neither the acceptor nor other sessions wait with it; the frontend's first call does.
  s->executor_ = std::thread([raw = s.get()] { raw->Run(); });
  PHOS_LOG(Info, "runtime", "session for pid {} opened ({} GPUs, device group pending)", pid, gpus);
  return s;
}

Status Session::LeaseGroup() {
  Result<ctxpool::DeviceGroupLease> group = groups_->Lease(device_count_, &stop_);
  if (!group.ok()) return group.status();
  {
    std::unique_lock nccl = watch_.Lock();
    group_.emplace(std::move(*group));
  }
  watch_.Arm();
  context_ = group_->context(0);
  PHOS_LOG(Info, "runtime", "pid {}: device group {} leased ({} GPUs)", pid_, group_->group_id(), device_count_);
  return Status::Ok();
}

Session::~Session() {
  stop_.store(true);
  ring_->Close();
  // The executor may be blocked in a synchronisation behind a host function that will never
  // return: its gate opens now.
  host_fns_->OpenAll();
  // Or in a collective that ranks of it never entered: only an abort ends that wait.
  watch_.AbortNow("the session ended");
  if (executor_.joinable()) executor_.join();
  ReleaseAll();
  close(control_fd_);
  PHOS_LOG(Info, "runtime", "session for pid {} ended", pid_);
}

void Session::ReleaseAll() {
  // A soft capture's copies and streams (the capture itself ended: EndSession waits for it); its
  // guards in the ranges the scrub unmaps go with them, and it answers faults until then.
  const std::shared_ptr<SoftCapture> guards_left = ReleaseSoftCapture(/*unmapping=*/true);
  // The loaders first: they wait for their copies and unguard before the memory goes to the scrub.
  loaders_published_.store(false);
  loaders_.clear();
  // Before anything is freed: the gate words go once the gated streams passed them.
  host_fns_->Close();
  if (context_ == nullptr) {
    if (guards_left != nullptr) UnregisterGuardClient(guards_left.get());  // no range was borrowed
    return;
  }
  ReleaseGraphs();
  ReleaseBlasScratch();
  ReleaseBlasLt();
  // Peer access the function enabled would outlive it in pooled contexts.
  DisablePeers(-1);
  ScrubBorrowedSpaces();
  if (guards_left != nullptr) UnregisterGuardClient(guards_left.get());
  ReleaseNccl();
  if (group_) {
    ReleaseToGroup();
    group_.reset();  // the pool scrubs every context of the group before anyone leases it
    context_ = nullptr;
    return;
  }
  ReleaseDevices();
  // Everything the session made in the context goes back with it: the pool's scrub waits for the
  // work, zeroes and frees the buffers and destroys the rest before anyone leases it again.
  ctxpool::TenantResources& tenant = lease_->tenant();
  for (auto& [vid, h] : blas_) {
    if (vid != pooled_blas_vid_) tenant.blas_handles.push_back(h.handle);
  }
  for (auto& [vid, e] : events_) tenant.events.push_back(e.event);
  for (auto& [vid, s] : streams_) tenant.streams.push_back(s.stream);
  for (auto& [base, bytes] : buffers_.buffers()) {
    if (space_ == nullptr || !space_->Contains(base)) tenant.allocations.push_back({base, bytes});
  }
  if (space_ != nullptr) {
    // The scrub zeroes whole mappings (sub-allocations share them), unmaps and releases them, then
    // frees the range: the next tenant can never reach these addresses' old bytes.
    driver::ContextScope scope(*driver_, context_);  // Release waits for the context's work
    AddressSpaceRelease released = space_->Release();
    for (const auto& m : released.mappings) tenant.mappings.push_back({m.base, m.bytes, m.handle});
    if (released.range_bytes != 0) tenant.address_ranges.push_back({released.range_base, released.range_bytes});
    space_.reset();
  }
  ReleaseModules();
  lease_.reset();
  context_ = nullptr;
}

void Session::ReleaseModules() {
  driver::ContextScope scope(*driver_, context_);
  RestoreFunctionAttributes();
  ctxpool::ModulesByHash kept = std::exchange(preloaded_modules_, {});
  if (restore_ == nullptr || restore_->plan().manifest == nullptr) {
    // Kept from an earlier instance and not sent by this one: no snapshot says they are needed.
    for (auto& [hash, module] : kept) lease_->tenant().modules.push_back(module);
    kept.clear();
  }
  for (auto& [id, m] : modules_) {
    if (m.module == nullptr) continue;
    const bool keep = !modules_owner_.empty() && !m.image.empty() &&
                      kept.emplace(store::ChunkId::Of(m.image.data(), m.image.size()).ToBytes(), m.module).second;
    if (!keep) {
      ZeroGlobals(m, 0);
      lease_->tenant().modules.push_back(m.module);
    }
  }
  lease_->KeepModules(modules_owner_, std::move(kept));
}

void Session::Run() {
  if (groups_ != nullptr) {
    open_status_ = LeaseGroup();
    if (!open_status_.ok()) {
      PHOS_LOG(Error, "runtime", "pid {}: no device group of {} GPUs, every call fails: {}", pid_, device_count_,
               open_status_.message());
    }
  }
  if (restore_ != nullptr) {
    open_status_ = AdoptRestore();
    if (!open_status_.ok()) {
      PHOS_LOG(Error, "restore", "pid {}: restore failed, every call fails: {}", pid_, open_status_.message());
    }
  }
  driver_->cuCtxSetCurrent(context_);
  ipc::RecordView record;
  while (!stop_.load(std::memory_order_relaxed)) {
    Result<bool> next = ring_->Peek(&record);
    if (!next.ok()) {
      // One line per session, and at most one a second: a tenant opening sessions to send bad
      // records must not fill the log.
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "session for pid {}: {}; closing its ring", pid_, next.status().message());
      ring_->Close();
      return;
    }
    if (!*next) {
      RunPendingTask();
      ring_->WaitForWork(static_cast<int>(rules_.idle_wait.count()), [this] { return TaskPending(); });
      continue;
    }
    size_t reply_len = 0;
    CUresult result = CUDA_SUCCESS;
    {
      // An NCCL record runs under the watch's lock; any record may wait on a collective.
      const OpHandler* handler = FindOpHandler(record.header.opcode);
      std::unique_lock<std::mutex> nccl;
      if (handler != nullptr && handler->library == Library::kNccl) nccl = watch_.Lock();
      watch_.BeginRecord();
      result = Route(record);
      if (result == CUDA_SUCCESS && soft_ != nullptr) result = CopyBeforeWrite(record);
      if (result == CUDA_SUCCESS && gating_) result = Gate(record);
      if (result == CUDA_SUCCESS) result = Execute(record, &reply_len);
      watch_.EndRecord();
    }
    // The fault may surface as another call's error (a lookup in the failed context): any failure
    // of such a session asks the context whether it is in the sticky state. A query, not a
    // synchronize: one bad call must not make the executor wait for all the work queued.
    if (result != CUDA_SUCCESS && maps_shared_ && !shared_fault_seen_ &&
        (result == CUDA_ERROR_ILLEGAL_ADDRESS || driver_->cuStreamQuery(nullptr) == CUDA_ERROR_ILLEGAL_ADDRESS)) {
      OnSharedBufferFault();
    }
    if (result != CUDA_SUCCESS && record.header.opcode == static_cast<uint16_t>(ipc::Op::kLaunchHostFunc)) {
      RefuseHostFn(record, result);
    }
    if ((record.header.flags & ipc::kFlagReply) != 0) {
      ring_->WriteReply(record.header.seq, result, ring_->reply_payload_for_write(), result == CUDA_SUCCESS ? reply_len : 0);
    } else if (result != CUDA_SUCCESS) {
      int32_t none = 0;
      ring_->header()->async_error.compare_exchange_strong(none, result);
    }
    uint64_t seq = record.header.seq;
    ring_->Release(record);
    ring_->Complete(seq);
  }
}

bool Session::HandleRoom(const char* what) {
  const size_t held =
      streams_.size() + events_.size() + blas_.size() + comms_.size() + graphs_.size() + graph_execs_.size();
  if (held < rules_.handles) return true;
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: the session holds {} handles, its limit", pid_, what, held);
  return false;
}

bool Session::Owns(uint64_t ptr, uint64_t bytes, const char* what) {
  // A module global the session resolved is memory its calls may touch, as its buffers are.
  if (globals_.Contains(ptr, bytes)) return true;
  Status s = buffers_.Check(ptr, bytes, what);
  if (s.ok()) return true;
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: refused: {}", pid_, s.message());
  return false;
}

Result<CUstream> Session::StreamOf(uint64_t vid) const {
  if (vid == 0 || vid == 1) return CUstream{nullptr};
  if (vid == 2) return CU_STREAM_PER_THREAD;
  auto it = streams_.find(vid);
  if (it == streams_.end()) return Status::NotFound("stream");
  return it->second.stream;
}

int Session::HandleDevice(uint64_t vid) const {
  if (auto it = streams_.find(vid); it != streams_.end()) return it->second.device;
  if (auto it = events_.find(vid); it != events_.end()) return it->second.device;
  if (auto it = blas_.find(vid); it != blas_.end()) return it->second.device;
  if (auto it = graphs_.find(vid); it != graphs_.end()) return it->second.device;
  if (auto it = graph_execs_.find(vid); it != graph_execs_.end()) return it->second.device;
  return -1;
}

}  // namespace phos::runtime
