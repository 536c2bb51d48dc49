#include "session.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/store/chunk.h"

namespace phos::runtime {
namespace {

using ipc::Op;

// Copies the fixed-size argument struct out of the ring (the producer may rewrite the ring under
// us; we only ever act on our own copy).
template <typename T>
bool Args(const uint8_t* payload, size_t len, T* out) {
  if (len < sizeof(T)) return false;
  std::memcpy(out, payload, sizeof(T));
  return true;
}

template <typename T>
bool ExactArgs(const uint8_t* payload, size_t len, T* out) {
  return len == sizeof(T) && Args(payload, len, out);
}

constexpr uint64_t kMaxSessionModuleBytes = 2ull << 30;

}  // namespace

Session::Session(driver::DriverTable* driver, std::unique_ptr<ipc::Ring> ring, std::string token, int control_fd, int pid)
    : driver_(driver), ring_(std::move(ring)), token_(std::move(token)), control_fd_(control_fd), pid_(pid) {}

Result<std::unique_ptr<Session>> Session::Open(driver::DriverTable* driver, ctxpool::ContextLease lease, int device,
                                               uint64_t va_bytes, std::unique_ptr<ipc::Ring> ring, std::string token,
                                               int control_fd, int pid) {
  std::unique_ptr<Session> s(new Session(driver, std::move(ring), std::move(token), control_fd, pid));
  s->base_device_ = device;
  s->va_bytes_ = va_bytes;
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&s->device_count_));
  if (lease.device() != device) {
    return Status::InvalidArgument(fmt::format("session on device {} given a context of device {}", device, lease.device()));
  }
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
                                                        int control_fd, int pid) {
  if (groups == nullptr) return Status::FailedPrecondition(fmt::format("a session of {} GPUs needs device groups (NCCL)", gpus));
  if (gpus < 2) return Status::InvalidArgument(fmt::format("a device group session needs at least 2 GPUs, not {}", gpus));
  std::unique_ptr<Session> s(new Session(driver, std::move(ring), std::move(token), control_fd, pid));
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
  group_.emplace(std::move(*group));
  context_ = group_->context(0);
  PHOS_LOG(Info, "runtime", "pid {}: device group {} leased ({} GPUs)", pid_, group_->group_id(), device_count_);
  return Status::Ok();
}

Session::~Session() {
  stop_.store(true);
  ring_->Close();
  if (executor_.joinable()) executor_.join();
  ReleaseAll();
  close(control_fd_);
  PHOS_LOG(Info, "runtime", "session for pid {} ended", pid_);
}

void Session::ReleaseAll() {
  // The loaders first: they wait for their copies and unguard before the memory goes to the scrub.
  loaders_published_.store(false);
  loaders_.clear();
  if (context_ == nullptr) return;
  ScrubBorrowedSpaces();
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
    if (vid != pooled_blas_vid_) tenant.blas_handles.push_back(h);
  }
  for (auto& [vid, e] : events_) tenant.events.push_back(e);
  for (auto& [vid, s] : streams_) tenant.streams.push_back(s);
  for (auto& [base, bytes] : buffers_.buffers()) {
    if (space_ == nullptr || !space_->Contains(base)) tenant.allocations.push_back({base, bytes});
  }
  if (space_ != nullptr) {
    // The scrub zeroes whole mappings (sub-allocations share them), unmaps and releases them, then
    // frees the range: the next tenant can never reach these addresses' old bytes.
    AddressSpaceRelease released = space_->Release();
    for (const auto& m : released.mappings) tenant.mappings.push_back({m.base, m.bytes, m.handle});
    if (released.range_bytes != 0) tenant.address_ranges.push_back({released.range_base, released.range_bytes});
    space_.reset();
  }
  for (auto& [id, m] : modules_) {
    if (m.module != nullptr) tenant.modules.push_back(m.module);
  }
  for (auto& [hash, module] : preloaded_modules_) tenant.modules.push_back(module);
  preloaded_modules_.clear();
  lease_.reset();
  context_ = nullptr;
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
      PHOS_LOG(Error, "runtime", "session for pid {}: {}; closing its ring", pid_, next.status().message());
      ring_->Close();
      return;
    }
    if (!*next) {
      RunPendingTask();
      ring_->WaitForWork(20);
      continue;
    }
    size_t reply_len = 0;
    CUresult result = Route(record);
    if (result == CUDA_SUCCESS && gating_) result = Gate(record);
    if (result == CUDA_SUCCESS) result = Execute(record, &reply_len);
    AfterExecute(record, result);
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

bool Session::Owns(uint64_t ptr, uint64_t bytes, const char* what) {
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
  return it->second;
}

#define PHOS_STREAM_OR_RETURN(var, vid)        \
  Result<CUstream> var##_r = StreamOf(vid);    \
  if (!var##_r.ok()) return CUDA_ERROR_INVALID_HANDLE; \
  CUstream var = *var##_r

CUresult Session::Execute(const ipc::RecordView& record, size_t* reply_len) {
  const uint8_t* p = record.payload;
  size_t len = record.header.length;
  uint8_t* out = ring_->reply_payload_for_write();
  driver::DriverTable& d = *driver_;
  switch (static_cast<Op>(record.header.opcode)) {
    case Op::kPad:
      return CUDA_SUCCESS;
    case Op::kDeviceGetCount: {
      // The node's devices for a single-GPU session, the group's for a device group session.
      int n = device_count_;
      std::memcpy(out, &n, sizeof(n));
      *reply_len = sizeof(n);
      return CUDA_SUCCESS;
    }
    case Op::kDeviceGetAttribute: {
      ipc::AttributeArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      int v = 0;
      CUresult r = d.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a.attribute), PhysicalDevice(a.device));
      std::memcpy(out, &v, sizeof(v));
      *reply_len = sizeof(v);
      return r;
    }
    case Op::kDeviceGetName: {
      ipc::DeviceArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      char name[256] = {};
      CUresult r = d.cuDeviceGetName(name, sizeof(name) - 1, PhysicalDevice(a.device));
      std::memcpy(out, name, sizeof(name));
      *reply_len = sizeof(name);
      return r;
    }
    case Op::kDeviceTotalMem: {
      ipc::DeviceArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      size_t bytes = 0;
      CUresult r = d.cuDeviceTotalMem(&bytes, PhysicalDevice(a.device));
      uint64_t v = bytes;
      std::memcpy(out, &v, sizeof(v));
      *reply_len = sizeof(v);
      return r;
    }
    case Op::kDriverGetVersion: {
      int v = 0;
      CUresult r = d.cuDriverGetVersion(&v);
      std::memcpy(out, &v, sizeof(v));
      *reply_len = sizeof(v);
      return r;
    }
    case Op::kMemAlloc: {
      ipc::SizeArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      CUdeviceptr ptr = 0;
      CUresult r = AllocateBuffer(a.bytes, &ptr);
      if (r != CUDA_SUCCESS) return r;
      if (!buffers_.Insert(ptr, a.bytes).ok()) {
        FreeBuffer(ptr);
        return CUDA_ERROR_UNKNOWN;
      }
      if (route_device_ != 0) buffer_devices_[ptr] = route_device_;
      uint64_t v = ptr;
      std::memcpy(out, &v, sizeof(v));
      *reply_len = sizeof(v);
      return CUDA_SUCCESS;
    }
    case Op::kMemFree: {
      ipc::PointerArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      if (a.ptr == 0) return CUDA_SUCCESS;
      if (!buffers_.Contains(a.ptr, 0) || !buffers_.Erase(a.ptr).ok()) {
        PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: refused free of {:#x}, not a buffer of this session", pid_, a.ptr);
        return CUDA_ERROR_INVALID_VALUE;
      }
      buffer_devices_.erase(a.ptr);
      return FreeBuffer(a.ptr);
    }
    case Op::kMemcpyHtoD: {
      ipc::CopyArgs a;
      if (!Args(p, len, &a) || a.bytes != len - sizeof(a)) return CUDA_ERROR_INVALID_VALUE;
      if (!Owns(a.dst, a.bytes, "copy destination")) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.stream);
      // The source is ring memory the frontend reuses once the record is released: the copy must
      // be complete on return. The driver treats it as pageable memory, whose copies are.
      if (a.stream == 0) return d.cuMemcpyHtoD(a.dst, p + sizeof(a), a.bytes);
      return d.cuMemcpyHtoDAsync(a.dst, p + sizeof(a), a.bytes, stream);
    }
    case Op::kMemcpyDtoH: {
      ipc::CopyArgs a;
      if (!ExactArgs(p, len, &a) || a.bytes > ring_->reply_capacity()) return CUDA_ERROR_INVALID_VALUE;
      if (!Owns(a.src, a.bytes, "copy source")) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.stream);
      CUresult r;
      if (a.stream == 0) {
        r = d.cuMemcpyDtoH(out, a.src, a.bytes);
      } else {
        r = d.cuMemcpyDtoHAsync(out, a.src, a.bytes, stream);
        if (r == CUDA_SUCCESS) r = d.cuStreamSynchronize(stream);
      }
      *reply_len = a.bytes;
      return r;
    }
    case Op::kMemcpyDtoD: {
      ipc::CopyArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      if (!Owns(a.dst, a.bytes, "copy destination") || !Owns(a.src, a.bytes, "copy source")) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.stream);
      if (a.stream == 0) return d.cuMemcpyDtoD(a.dst, a.src, a.bytes);
      return d.cuMemcpyDtoDAsync(a.dst, a.src, a.bytes, stream);
    }
    case Op::kMemset: {
      ipc::MemsetArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      if (!Owns(a.dst, a.bytes, "memset destination")) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.stream);
      if (a.stream == 0) return d.cuMemsetD8(a.dst, static_cast<unsigned char>(a.value), a.bytes);
      return d.cuMemsetD8Async(a.dst, static_cast<unsigned char>(a.value), a.bytes, stream);
    }
    case Op::kDeviceSynchronize:
      return d.cuCtxSynchronize();
    case Op::kStreamCreate: {
      ipc::FlagsArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      CUstream s = nullptr;
      CUresult r = d.cuStreamCreate(&s, a.flags);
      if (r != CUDA_SUCCESS) return r;
      uint64_t vid = NewHandle();
      streams_[vid] = s;
      stream_flags_[vid] = a.flags;
      std::memcpy(out, &vid, sizeof(vid));
      *reply_len = sizeof(vid);
      return CUDA_SUCCESS;
    }
    case Op::kStreamDestroy: {
      ipc::HandleArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      auto it = streams_.find(a.handle);
      if (it == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
      CUresult r = d.cuStreamDestroy(it->second);
      stream_flags_.erase(it->first);
      streams_.erase(it);
      return r;
    }
    case Op::kStreamSynchronize:
    case Op::kStreamQuery: {
      ipc::HandleArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.handle);
      return static_cast<Op>(record.header.opcode) == Op::kStreamQuery ? d.cuStreamQuery(stream) : d.cuStreamSynchronize(stream);
    }
    case Op::kStreamWaitEvent:
    case Op::kEventRecord: {
      ipc::StreamEventArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      PHOS_STREAM_OR_RETURN(stream, a.stream);
      auto it = events_.find(a.event);
      if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
      return static_cast<Op>(record.header.opcode) == Op::kEventRecord ? d.cuEventRecord(it->second, stream)
                                                                       : d.cuStreamWaitEvent(stream, it->second, 0);
    }
    case Op::kEventCreate: {
      ipc::FlagsArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      CUevent e = nullptr;
      CUresult r = d.cuEventCreate(&e, a.flags);
      if (r != CUDA_SUCCESS) return r;
      uint64_t vid = NewHandle();
      events_[vid] = e;
      event_flags_[vid] = a.flags;
      std::memcpy(out, &vid, sizeof(vid));
      *reply_len = sizeof(vid);
      return CUDA_SUCCESS;
    }
    case Op::kEventDestroy:
    case Op::kEventSynchronize:
    case Op::kEventQuery: {
      ipc::HandleArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      auto it = events_.find(a.handle);
      if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
      Op op = static_cast<Op>(record.header.opcode);
      if (op == Op::kEventSynchronize) return d.cuEventSynchronize(it->second);
      if (op == Op::kEventQuery) return d.cuEventQuery(it->second);
      CUresult r = d.cuEventDestroy(it->second);
      event_flags_.erase(it->first);
      events_.erase(it);
      return r;
    }
    case Op::kEventElapsedTime: {
      ipc::StreamEventArgs a;
      if (!ExactArgs(p, len, &a)) return CUDA_ERROR_INVALID_VALUE;
      auto start = events_.find(a.stream);
      auto end = events_.find(a.event);
      if (start == events_.end() || end == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
      float ms = 0;
      CUresult r = d.cuEventElapsedTime(&ms, start->second, end->second);
      std::memcpy(out, &ms, sizeof(ms));
      *reply_len = sizeof(ms);
      return r;
    }
    case Op::kModuleChunk:
      return ModuleChunk(p, len);
    case Op::kFunctionGet:
      return FunctionGet(p, len, reply_len);
    case Op::kLaunch:
      return Launch(p, len);
    default:
      if (record.header.opcode >= static_cast<uint16_t>(Op::kSetDevice)) return ExecuteDevices(record, reply_len);
      return ExecuteBlas(record, reply_len);
  }
}

CUresult Session::ModuleChunk(const uint8_t* payload, size_t len) {
  ipc::ModuleChunkArgs a;
  if (!Args(payload, len, &a) || a.module_id == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = len - sizeof(a);
  Module& m = modules_[a.module_id];
  if (m.module != nullptr || m.load_result != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;  // already loaded
  if (m.total_bytes == 0) {
    if (a.total_bytes == 0 || a.total_bytes > ipc::kMaxModuleBytes || module_bytes_ + a.total_bytes > kMaxSessionModuleBytes) {
      PHOS_LOG(Warn, "runtime", "pid {}: module of {} bytes refused (limit {} per module)", pid_, a.total_bytes, ipc::kMaxModuleBytes);
      modules_.erase(a.module_id);
      return CUDA_ERROR_INVALID_VALUE;
    }
    m.total_bytes = a.total_bytes;
    m.is_fatbin = a.is_fatbin != 0;
    module_bytes_ += a.total_bytes;
    module_order_.push_back(a.module_id);
    m.pending.reserve(a.total_bytes);
  }
  if (a.offset != m.pending.size() || bytes > m.total_bytes - m.pending.size()) return CUDA_ERROR_INVALID_VALUE;
  m.pending.insert(m.pending.end(), payload + sizeof(a), payload + len);
  if (m.pending.size() < m.total_bytes) return CUDA_SUCCESS;
  if (restore_ != nullptr) {
    store::ChunkId id = store::ChunkId::Of(m.pending.data(), m.pending.size());
    m.hash = {id.low, id.high};
    // The snapshot's image: its module was loaded while the function forked.
    if (auto pre = preloaded_modules_.find(id.ToBytes()); pre != preloaded_modules_.end() && route_device_ == 0) {
      m.module = pre->second;
      preloaded_modules_.erase(pre);
      m.image = std::move(m.pending);
      m.pending = {};
      return CUDA_SUCCESS;
    }
  }
  m.load_result = driver_->cuModuleLoadData(&m.module, m.pending.data());
  if (m.load_result != CUDA_SUCCESS) {
    const char* name = nullptr;
    driver_->cuGetErrorName(m.load_result, &name);
    PHOS_LOG(Warn, "runtime", "pid {}: {} module {} ({} bytes) did not load: {}; its kernels fail to launch with cudaErrorNoKernelImageForDevice",
             pid_, m.is_fatbin ? "fatbin" : "simgpu", a.module_id, m.total_bytes, name != nullptr ? name : "?");
    m.module = nullptr;
  }
  m.image = std::move(m.pending);
  m.pending = {};
  // A module that fails to load is recorded, not reported: CUDA reports it at the launch.
  return CUDA_SUCCESS;
}

CUresult Session::FunctionGet(const uint8_t* payload, size_t len, size_t* reply_len) {
  ipc::FunctionGetArgs a;
  if (!Args(payload, len, &a) || a.name_bytes == 0 || a.name_bytes > ipc::kMaxNameBytes || a.name_bytes != len - sizeof(a)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::string name(reinterpret_cast<const char*>(payload + sizeof(a)), a.name_bytes);
  CUfunction f = nullptr;
  CUresult r = CUDA_ERROR_NOT_FOUND;
  bool failed_module = false;
  uint64_t found_in = 0;
  for (uint64_t id : module_order_) {
    if (a.module_id != 0 && id != a.module_id) continue;
    const Module& m = modules_[id];
    if (m.module == nullptr) {
      failed_module |= m.load_result != CUDA_SUCCESS;
      continue;
    }
    r = driver_->cuModuleGetFunction(&f, m.module, name.c_str());
    if (r == CUDA_SUCCESS) {
      found_in = id;
      break;
    }
  }
  if (r != CUDA_SUCCESS) {
    CUresult out = failed_module ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_ERROR_NOT_FOUND;
    PHOS_LOG(Warn, "runtime", "pid {}: kernel {} not found in the session's modules{}", pid_, name,
             failed_module ? " (a module of its registration failed to load on this device)" : "");
    return out;
  }
  Function fn;
  fn.function = f;
  fn.module_id = found_in;
  fn.name = name;
  for (uint32_t i = 0; i < ipc::kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    if (driver_->cuFuncGetParamInfo(f, i, &offset, &size) != CUDA_SUCCESS) break;
    fn.params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    fn.param_bytes = std::max<uint32_t>(fn.param_bytes, static_cast<uint32_t>(offset + size));
  }
  if (fn.param_bytes > ipc::kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  if (restore_ != nullptr) {
    std::vector<ParamSlotLayout> layout;
    for (const ipc::ParamSlot& slot : fn.params) layout.push_back({slot.offset, slot.size});
    fn.meta = metadata_->GetOrBuild(modules_[found_in].hash, name, layout);
  }
  uint64_t vid = NewHandle();
  ipc::FunctionInfo info{vid, static_cast<uint32_t>(fn.params.size()), fn.param_bytes};
  uint8_t* out = ring_->reply_payload_for_write();
  std::memcpy(out, &info, sizeof(info));
  std::memcpy(out + sizeof(info), fn.params.data(), fn.params.size() * sizeof(ipc::ParamSlot));
  *reply_len = sizeof(info) + fn.params.size() * sizeof(ipc::ParamSlot);
  functions_[vid] = std::move(fn);
  return CUDA_SUCCESS;
}

CUresult Session::Launch(const uint8_t* payload, size_t len) {
  ipc::LaunchArgs a;
  if (!Args(payload, len, &a)) return CUDA_ERROR_INVALID_VALUE;
  auto it = functions_.find(a.function);
  if (it == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
  Function& fn = it->second;
  CUfunction function = fn.function;
  if (route_device_ != 0) {
    if (CUresult r = FunctionOn(fn, route_device_, &function); r != CUDA_SUCCESS) return r;
  }
  if (a.param_bytes != fn.param_bytes || len - sizeof(a) != a.param_bytes) return CUDA_ERROR_INVALID_VALUE;
  PHOS_STREAM_OR_RETURN(stream, a.stream);
  // Our own copy: the checks below must see what the kernel will get.
  alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
  std::memcpy(params, payload + sizeof(a), a.param_bytes);
  void* args[ipc::kMaxParams];
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ipc::ParamSlot& slot = fn.params[i];
    args[i] = params + slot.offset;
    // Every 8-byte word of a parameter that names device memory must name this session's own
    // (docs/design.md D8's rule for pointers and structs alike): a word inside no buffer and outside the
    // VA range of ours that the driver knows as an allocation is someone else's memory.
    for (uint32_t off = (slot.offset + 7) / 8 * 8; off + 8 <= slot.offset + slot.size; off += 8) {
      uint64_t word;
      std::memcpy(&word, params + off, sizeof(word));
      if (word == 0 || buffers_.Contains(word, 0)) continue;
      // Inside the session's own VA range (a freed part of one of its granules, say) is nobody
      // else's memory, even when the driver knows the granule.
      if (SpaceOf(word) != nullptr) continue;
      CUdeviceptr base = 0;
      size_t size = 0;
      if (driver_->cuMemGetAddressRange(&base, &size, word) == CUDA_SUCCESS) {
        PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: launch refused: parameter {} holds {:#x}, device memory of another owner",
                           pid_, i, word);
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
  }
  return driver_->cuLaunchKernel(function, a.grid[0], a.grid[1], a.grid[2], a.block[0], a.block[1], a.block[2],
                                 a.shared_bytes, stream, args, nullptr);
}

}  // namespace phos::runtime
