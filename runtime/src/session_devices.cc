// Multi-device sessions: a function may use several devices (cudaSetDevice). A device group
// session (the function declared gpus > 1) runs device d in its leased group's context d; a
// single-GPU session may still use every device of the node, with device 0's context leased from
// the context pool and the others created when first used. Each record runs in the right one: a call naming a stream, event or
// cuBLAS handle in the context of the device that handle was created on (as CUDA ties streams to
// devices), any other call in the session's current device's. Modules arrive once and are loaded
// into another device's context when a kernel is first launched there.
#include <cstring>

#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::Op;

// The u64 at `offset` of the record's payload, if there is one.
bool WordAt(const ipc::RecordView& record, size_t offset, uint64_t* out) {
  if (record.header.length < offset + sizeof(uint64_t)) return false;
  std::memcpy(out, record.payload + offset, sizeof(uint64_t));
  return true;
}

// Where the stream, event or cuBLAS handle that decides a record's device sits in its payload;
// -1 for records that run on the session's current device.
int HandleOffset(Op op) {
  switch (op) {
    case Op::kMemcpyHtoD:
    case Op::kMemcpyDtoH:
    case Op::kMemcpyDtoD: return offsetof(ipc::CopyArgs, stream);
    case Op::kMemset: return offsetof(ipc::MemsetArgs, stream);
    case Op::kLaunch: return offsetof(ipc::LaunchArgs, stream);
    case Op::kStreamDestroy:
    case Op::kStreamSynchronize:
    case Op::kStreamQuery:
    case Op::kEventDestroy:
    case Op::kEventSynchronize:
    case Op::kEventQuery:
    case Op::kBlasDestroy:
    case Op::kBlasSetMathMode:
    case Op::kBlasGemm:
    case Op::kBlasSgemv: return 0;
    case Op::kStreamWaitEvent:
    case Op::kEventRecord: return offsetof(ipc::StreamEventArgs, stream);
    case Op::kEventElapsedTime: return offsetof(ipc::StreamEventArgs, stream);  // the start event
    case Op::kBlasSetStream: return offsetof(ipc::StreamEventArgs, event);      // the handle
    default: return -1;
  }
}

}  // namespace

int Session::PhysicalDevice(int device) const {
  if (device < 0 || device >= device_count_) return -1;
  return (base_device_ + device) % device_count_;
}

Result<CUcontext> Session::ContextOn(int device) {
  if (group_) {
    if (device < 0 || device >= group_->size()) return Status::InvalidArgument("no such device");
    return group_->context(device);
  }
  if (device == 0) return context_;
  if (auto it = device_contexts_.find(device); it != device_contexts_.end()) return it->second;
  int physical = PhysicalDevice(device);
  if (physical < 0) return Status::InvalidArgument("no such device");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuDeviceGet(&dev, physical));
  PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuCtxCreate(&ctx, nullptr, 0, dev));
  device_contexts_[device] = ctx;
  PHOS_LOG(Info, "runtime", "pid {}: context on device {} (node device {}) created", pid_, device, physical);
  return ctx;
}

CUresult Session::Route(const ipc::RecordView& record) {
  if (!open_status_.ok()) return CUDA_ERROR_NO_DEVICE;  // logged once when the group lease failed
  Op op = static_cast<Op>(record.header.opcode);
  int device = device_;
  if (op == Op::kModuleChunk || op == Op::kFunctionGet) {
    device = 0;  // modules live in device 0's context; other devices load them on first launch
  } else if (op == Op::kNcclCollective || op == Op::kSetDevice || op == Op::kNcclGroupEnd) {
    return CUDA_SUCCESS;  // they pick their contexts themselves
  } else if (int offset = HandleOffset(op); offset >= 0) {
    uint64_t vid = 0;
    if (WordAt(record, static_cast<size_t>(offset), &vid)) {
      if (auto it = handle_devices_.find(vid); it != handle_devices_.end()) device = it->second;
    }
  }
  Result<CUcontext> ctx = ContextOn(device);
  if (!ctx.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: no context on device {}: {}", pid_, device, ctx.status().message());
    return CUDA_ERROR_INVALID_DEVICE;
  }
  route_device_ = device;
  return driver_->cuCtxSetCurrent(*ctx);
}

void Session::AfterExecute(const ipc::RecordView& record, CUresult result) {
  Op op = static_cast<Op>(record.header.opcode);
  if (result != CUDA_SUCCESS || (op != Op::kStreamCreate && op != Op::kEventCreate && op != Op::kBlasCreate)) return;
  // The new handle's id is the reply; it belongs to the device it was created on.
  uint64_t vid = 0;
  std::memcpy(&vid, ring_->reply_payload_for_write(), sizeof(vid));
  if (route_device_ != 0) handle_devices_[vid] = route_device_;
}

CUresult Session::ExecuteDevices(const ipc::RecordView& record, size_t* reply_len) {
  if (static_cast<Op>(record.header.opcode) != Op::kSetDevice) return ExecuteNccl(record, reply_len);
  ipc::DeviceArgs a;
  if (record.header.length != sizeof(a)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(&a, record.payload, sizeof(a));
  if (PhysicalDevice(a.device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  Result<CUcontext> ctx = ContextOn(a.device);
  if (!ctx.ok()) {
    PHOS_LOG(Warn, "runtime", "pid {}: cudaSetDevice({}): {}", pid_, a.device, ctx.status().message());
    return CUDA_ERROR_INVALID_DEVICE;
  }
  device_ = a.device;
  return CUDA_SUCCESS;
}

CUresult Session::FunctionOn(Function& fn, int device, CUfunction* out) {
  if (auto it = fn.on_device.find(device); it != fn.on_device.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  auto m = modules_.find(fn.module_id);
  if (m == modules_.end() || m->second.image.empty()) return CUDA_ERROR_INVALID_HANDLE;
  CUmodule& module = m->second.on_device[device];
  // The record's context (the device's) is current: the module loads there.
  if (module == nullptr) {
    if (CUresult r = driver_->cuModuleLoadData(&module, m->second.image.data()); r != CUDA_SUCCESS) {
      m->second.on_device.erase(device);
      return r;
    }
  }
  CUfunction f = nullptr;
  if (CUresult r = driver_->cuModuleGetFunction(&f, module, fn.name.c_str()); r != CUDA_SUCCESS) return r;
  fn.on_device[device] = f;
  *out = f;
  return CUDA_SUCCESS;
}

void Session::ReleaseDevices() {
  for (auto& [device, ctx] : device_contexts_) {
    driver_->cuCtxSetCurrent(ctx);
    driver_->cuCtxSynchronize();
    for (auto it = handle_devices_.begin(); it != handle_devices_.end();) {
      if (it->second != device) {
        ++it;
        continue;
      }
      uint64_t vid = it->first;
      if (auto b = blas_.find(vid); b != blas_.end()) {
        driver_->cublasDestroy(b->second);
        blas_.erase(b);
      } else if (auto e = events_.find(vid); e != events_.end()) {
        driver_->cuEventDestroy(e->second);
        events_.erase(e);
      } else if (auto s = streams_.find(vid); s != streams_.end()) {
        driver_->cuStreamDestroy(s->second);
        streams_.erase(s);
      }
      it = handle_devices_.erase(it);
    }
    for (auto& [id, m] : modules_) {
      if (auto it = m.on_device.find(device); it != m.on_device.end()) {
        driver_->cuModuleUnload(it->second);
        m.on_device.erase(it);
      }
    }
  }
  // Memory of every device goes before any context does (destroying a context would free its
  // memory under our buffer table, and another session could be given the addresses meanwhile).
  // They are zeroed first, as the pool's scrub would (the addresses go back to the driver).
  if (!device_contexts_.empty()) {
    driver_->cuCtxSetCurrent(context_);
    for (auto& [base, bytes] : buffers_.buffers()) driver_->cuMemsetD8Async(base, 0, bytes, nullptr);
    driver_->cuCtxSynchronize();
    for (uint64_t base : buffers_.Bases()) {
      FreeBuffer(base);
      buffers_.Erase(base).IgnoreError();
    }
    buffer_devices_.clear();
  }
  for (auto& [device, ctx] : device_contexts_) {
    driver_->cuCtxSetCurrent(nullptr);
    driver_->cuCtxDestroy(ctx);
  }
  device_contexts_.clear();
}

void Session::ReleaseToGroup() {
  auto device_of = [](const std::unordered_map<uint64_t, int>& devices, uint64_t key) {
    auto it = devices.find(key);
    return it == devices.end() ? 0 : it->second;
  };
  for (auto& [vid, h] : blas_) {
    if (vid != pooled_blas_vid_) group_->tenant(device_of(handle_devices_, vid)).blas_handles.push_back(h);
  }
  for (auto& [vid, e] : events_) group_->tenant(device_of(handle_devices_, vid)).events.push_back(e);
  for (auto& [vid, st] : streams_) group_->tenant(device_of(handle_devices_, vid)).streams.push_back(st);
  for (auto& [base, bytes] : buffers_.buffers()) {
    // Memory of the instance range went with ScrubBorrowedSpaces; the rest is cuMemAlloc'ed.
    if (SpaceOf(base) == nullptr) group_->tenant(device_of(buffer_devices_, base)).allocations.push_back({base, bytes});
  }
  for (auto& [id, m] : modules_) {
    if (m.module != nullptr) group_->tenant(0).modules.push_back(m.module);
    for (auto& [device, module] : m.on_device) group_->tenant(device).modules.push_back(module);
  }
  for (auto& [hash, module] : preloaded_modules_) group_->tenant(0).modules.push_back(module);
  preloaded_modules_.clear();
  blas_.clear();
  events_.clear();
  streams_.clear();
  modules_.clear();
  handle_devices_.clear();
  buffer_devices_.clear();
}

}  // namespace phos::runtime
