// Multi-device sessions: a function may use several devices (cudaSetDevice). A device group
// session (the function declared gpus > 1) runs device d in its leased group's context d; a
// single-GPU session may still use every device of the node, with device 0's context leased from
// the context pool and the others created when first used. Each record runs in the right one: a call naming a stream, event or
// cuBLAS handle in the context of the device that handle was created on (as CUDA ties streams to
// devices), any other call in the session's current device's. Modules arrive once and are loaded
// into another device's context when a kernel is first launched there. The calls about a device as
// a whole live here too: its properties in one record, memory information, reset and peer access
// between the session's devices.
#include <algorithm>
#include <cstring>
#include <vector>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "session.h"

namespace phos::runtime {

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
  const OpHandler* handler = FindOpHandler(record.header.opcode);
  Placement placement = handler != nullptr ? handler->placement : Placement::kCurrentDevice;
  int device = device_;
  switch (placement) {
    case Placement::kCurrentDevice: break;
    case Placement::kDeviceZero: device = 0; break;
    case Placement::kOwnChoice: return CUDA_SUCCESS;
    case Placement::kHandleDevice:
    case Placement::kNcclStream: {
      // A record too short to hold the handle runs nowhere in particular: Execute refuses it.
      uint64_t vid = 0;
      if (record.header.length >= handler->handle_offset + sizeof(vid)) {
        std::memcpy(&vid, record.payload + handler->handle_offset, sizeof(vid));
        if (int owner = HandleDevice(vid); owner >= 0) {
          device = owner;
        } else if (placement == Placement::kNcclStream) {
          // The default stream the call names is its communicator's device's, where the call runs
          // and where a restoring session's gate must make it wait.
          uint64_t comm = 0;
          std::memcpy(&comm, record.payload, sizeof(comm));
          if (auto it = comms_.find(comm); it != comms_.end()) device = it->second.device;
        }
      }
      break;
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

// The node's devices for a single-GPU session, the group's for a device group session.
CUresult Session::DeviceGetCount(const NoArgs&, const Call& call) {
  call.Reply(int32_t{device_count_});
  return CUDA_SUCCESS;
}

CUresult Session::DriverGetVersion(const NoArgs&, const Call& call) {
  int v = 0;
  CUresult r = driver_->cuDriverGetVersion(&v);
  call.Reply(int32_t{v});
  return r;
}

CUresult Session::SetDevice(const ipc::DeviceArgs& a, const Call& call) {
  if (PhysicalDevice(a.device) < 0) return CUDA_ERROR_INVALID_DEVICE;
  Result<CUcontext> ctx = ContextOn(a.device);
  if (!ctx.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}({}): {}", pid_, call.name, a.device,
                       ctx.status().message());
    return CUDA_ERROR_INVALID_DEVICE;
  }
  device_ = a.device;
  return CUDA_SUCCESS;
}

CUresult Session::DeviceGetProperties(const ipc::DeviceArgs& a, const Call& call) {
  static_assert(CU_DEVICE_ATTRIBUTE_MAX <= ipc::kDeviceAttributeSlots, "the wire record holds every attribute");
  const int physical = PhysicalDevice(a.device);
  if (physical < 0) return CUDA_ERROR_INVALID_DEVICE;
  ipc::DeviceProperties p{};
  for (uint32_t i = 0; i < ipc::kDeviceAttributeSlots; ++i) {
    p.results[i] = CUDA_ERROR_INVALID_VALUE;  // slots that are no attribute (0, MAX and beyond)
    if (i == 0 || i >= CU_DEVICE_ATTRIBUTE_MAX) continue;
    int value = 0;
    p.results[i] = driver_->cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(i), physical);
    p.attributes[i] = p.results[i] == CUDA_SUCCESS ? value : 0;
  }
  if (CUresult r = driver_->cuDeviceGetName(p.name, sizeof(p.name) - 1, physical); r != CUDA_SUCCESS) return r;
  CUuuid uuid{};
  if (CUresult r = driver_->cuDeviceGetUuid(&uuid, physical); r != CUDA_SUCCESS) return r;
  static_assert(sizeof(uuid.bytes) == sizeof(p.uuid));
  std::memcpy(p.uuid, uuid.bytes, sizeof(p.uuid));
  size_t bytes = 0;
  if (CUresult r = driver_->cuDeviceTotalMem(&bytes, physical); r != CUDA_SUCCESS) return r;
  p.total_memory = bytes;
  call.Reply(p);
  return CUDA_SUCCESS;
}

CUresult Session::MemGetInfo(const NoArgs&, const Call& call) {
  size_t free_bytes = 0, total_bytes = 0;
  if (CUresult r = driver_->cuMemGetInfo(&free_bytes, &total_bytes); r != CUDA_SUCCESS) return r;
  ipc::MemInfo info{free_bytes, total_bytes};
  if (rules_.device_bytes != 0) {
    const uint64_t held = buffers_.total_bytes();
    info.total_bytes = std::min<uint64_t>(info.total_bytes, rules_.device_bytes);
    info.free_bytes = std::min<uint64_t>(info.free_bytes, held >= rules_.device_bytes ? 0 : rules_.device_bytes - held);
  }
  call.Reply(info);
  return CUDA_SUCCESS;
}

CUresult Session::DeviceReset(const NoArgs&, const Call& call) {
  const int device = route_device_;
  CUresult first = CUDA_SUCCESS;
  auto note = [&first](CUresult r) {
    if (first == CUDA_SUCCESS) first = r;
  };
  // A restore still loading this device's buffers finishes first: its copies write into them.
  if (static_cast<size_t>(device) < loaders_.size() && loaders_[device].loader != nullptr) {
    if (Status s = loaders_[device].loader->Wait(); !s.ok()) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: the restore failed: {}", pid_, call.name, s.message());
    }
  }
  note(driver_->cuCtxSynchronize());
  auto on_device = [device](const auto& handles) {
    std::vector<uint64_t> vids;
    for (const auto& [vid, h] : handles) {
      if (h.device == device) vids.push_back(vid);
    }
    return vids;
  };
  // cuBLAS handles first: they may name the streams. Their cublasStatus_t is not this call's.
  for (uint64_t vid : on_device(blas_)) {
    if (CUresult r = BlasDestroy(ipc::HandleArgs{vid}, call); r != CUDA_SUCCESS) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: cuBLAS handle {} not destroyed (status {})", pid_, call.name,
                         vid, static_cast<int>(r));
    }
  }
  for (uint64_t vid : on_device(events_)) note(EventDestroy(ipc::HandleArgs{vid}, call));
  for (uint64_t vid : on_device(streams_)) note(StreamDestroy(ipc::HandleArgs{vid}, call));
  for (uint64_t base : buffers_.Bases()) {
    auto owner = buffer_devices_.find(base);
    if ((owner == buffer_devices_.end() ? 0 : owner->second) == device) note(MemFree(ipc::PointerArgs{base}, call));
  }
  note(DisablePeers(device));
  return first;
}

CUresult Session::DeviceCanAccessPeer(const ipc::PeerArgs& a, const Call& call) {
  const int device = PhysicalDevice(a.device), peer = PhysicalDevice(a.peer);
  if (device < 0 || peer < 0) return CUDA_ERROR_INVALID_DEVICE;
  int can = 0;
  CUresult r = driver_->cuDeviceCanAccessPeer(&can, device, peer);
  call.Reply(int32_t{can});
  return r;
}

Result<CUcontext> Session::PeerContext(int peer) {
  Result<CUcontext> own = ContextOn(route_device_);
  Result<CUcontext> other = ContextOn(peer);
  if (!own.ok()) return own.status();
  if (CUresult r = driver_->cuCtxSetCurrent(*own); r != CUDA_SUCCESS) {
    return driver::CuStatus(r, "cuCtxSetCurrent", driver_->error_text());
  }
  return other;
}

CUresult Session::DeviceEnablePeer(const ipc::PeerArgs& a, const Call& call) {
  if (a.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const int device = route_device_;
  if (PhysicalDevice(a.peer) < 0) return CUDA_ERROR_INVALID_DEVICE;
  int can = 0;
  if (CUresult r = driver_->cuDeviceCanAccessPeer(&can, PhysicalDevice(device), PhysicalDevice(a.peer));
      r != CUDA_SUCCESS) {
    return r;
  }
  // cudaDeviceEnablePeerAccess's answer when cudaDeviceCanAccessPeer says no (itself included).
  if (can == 0) return CUDA_ERROR_INVALID_DEVICE;
  if (peers_.count({device, a.peer}) != 0) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  Result<CUcontext> peer = PeerContext(a.peer);
  if (!peer.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}({}): {}", pid_, call.name, a.peer, peer.status().message());
    return CUDA_ERROR_INVALID_DEVICE;
  }
  CUresult r = driver_->cuCtxEnablePeerAccess(*peer, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return r;
  peers_[{device, a.peer}] = r == CUDA_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult Session::DeviceDisablePeer(const ipc::PeerArgs& a, const Call& call) {
  if (PhysicalDevice(a.peer) < 0) return CUDA_ERROR_INVALID_DEVICE;
  auto it = peers_.find({route_device_, a.peer});
  if (it == peers_.end()) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  const bool ours = it->second;
  peers_.erase(it);
  if (!ours) return CUDA_SUCCESS;
  Result<CUcontext> peer = PeerContext(a.peer);
  if (!peer.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}({}): {}", pid_, call.name, a.peer, peer.status().message());
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return driver_->cuCtxDisablePeerAccess(*peer);
}

CUresult Session::DisablePeers(int device) {
  CUresult first = CUDA_SUCCESS;
  for (auto it = peers_.begin(); it != peers_.end();) {
    const auto [from, to] = it->first;
    if (device >= 0 && from != device && to != device) {
      ++it;
      continue;
    }
    if (it->second) {
      Result<CUcontext> own = ContextOn(from);
      Result<CUcontext> peer = ContextOn(to);
      CUresult r = !own.ok() || !peer.ok() ? CUDA_ERROR_INVALID_CONTEXT : driver_->cuCtxSetCurrent(*own);
      if (r == CUDA_SUCCESS) r = driver_->cuCtxDisablePeerAccess(*peer);
      if (r != CUDA_SUCCESS) {
        PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: peer access {} -> {} not disabled: {}", pid_, from, to,
                           driver::CuStatus(r, "cuCtxDisablePeerAccess", driver_->error_text()).message());
        if (first == CUDA_SUCCESS) first = r;
      }
    }
    it = peers_.erase(it);
  }
  // The record's own context is current again for whatever follows.
  if (device >= 0) {
    if (Result<CUcontext> own = ContextOn(route_device_); own.ok()) driver_->cuCtxSetCurrent(*own);
  }
  return first;
}

CUresult Session::ModuleOn(Module& m, int device, CUmodule* out) {
  if (device == 0) {
    *out = m.module;
    return m.module == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
  }
  if (m.image.empty()) return CUDA_ERROR_INVALID_HANDLE;
  CUmodule& module = m.on_device[device];
  // The record's context (the device's) is current: the module loads there.
  if (module == nullptr) {
    const std::vector<uint8_t>& image = m.image;  // loaded on device 0: trusted, and its size known
    CUresult r = !m.is_fatbin && driver_->phosSimModuleLoadDataSized != nullptr
                     ? driver_->phosSimModuleLoadDataSized(&module, image.data(), image.size())
                     : driver_->cuModuleLoadData(&module, image.data());
    if (r != CUDA_SUCCESS) {
      m.on_device.erase(device);
      return r;
    }
  }
  *out = module;
  return CUDA_SUCCESS;
}

CUresult Session::FunctionOn(Function& fn, int device, CUfunction* out) {
  if (auto it = fn.on_device.find(device); it != fn.on_device.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  auto m = modules_.find(fn.module_id);
  if (m == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUmodule module = nullptr;
  if (CUresult r = ModuleOn(m->second, device, &module); r != CUDA_SUCCESS) return r;
  CUfunction f = nullptr;
  if (CUresult r = driver_->cuModuleGetFunction(&f, module, fn.name.c_str()); r != CUDA_SUCCESS) return r;
  fn.on_device[device] = f;
  *out = f;
  return CUDA_SUCCESS;
}

void Session::ReleaseDevices() {
  for (auto& [bound_device, ctx] : device_contexts_) {
    const auto device = bound_device;  // a plain variable: clang 14 cannot capture a binding
    driver_->cuCtxSetCurrent(ctx);
    driver_->cuCtxSynchronize();
    std::erase_if(blas_, [&](const auto& entry) {
      if (entry.second.device != device) return false;
      driver_->cublasDestroy(entry.second.handle);
      return true;
    });
    std::erase_if(events_, [&](const auto& entry) {
      if (entry.second.device != device) return false;
      driver_->cuEventDestroy(entry.second.event);
      return true;
    });
    std::erase_if(streams_, [&](const auto& entry) {
      if (entry.second.device != device) return false;
      driver_->cuStreamDestroy(entry.second.stream);
      return true;
    });
    for (auto& [id, m] : modules_) {
      if (auto it = m.on_device.find(device); it != m.on_device.end()) {
        ZeroGlobals(m, device);
        driver_->cuModuleUnload(it->second);
        m.on_device.erase(it);
      }
    }
  }
  // Memory of every device goes before any context does (destroying a context would free its
  // memory under our buffer table, and another session could be given the addresses meanwhile).
  // They are zeroed first, as the pool's scrub would (the addresses go back to the driver), each
  // in its own device's context: that is the context whose synchronisation waits for the zeroing.
  if (!device_contexts_.empty()) {
    for (uint64_t base : buffers_.Bases()) {
      auto owner = buffer_devices_.find(base);
      const int device = owner == buffer_devices_.end() ? 0 : owner->second;
      auto ctx = device_contexts_.find(device);
      driver_->cuCtxSetCurrent(device == 0 || ctx == device_contexts_.end() ? context_ : ctx->second);
      FreeBuffer(base, buffers_.buffers().at(base));
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
  for (auto& [vid, h] : blas_) {
    if (vid != pooled_blas_vid_) group_->tenant(h.device).blas_handles.push_back(h.handle);
  }
  for (auto& [vid, e] : events_) group_->tenant(e.device).events.push_back(e.event);
  for (auto& [vid, st] : streams_) group_->tenant(st.device).streams.push_back(st.stream);
  for (auto& [base, bytes] : buffers_.buffers()) {
    // Memory of the instance range went with ScrubBorrowedSpaces; the rest is cuMemAlloc'ed.
    auto device = buffer_devices_.find(base);
    if (SpaceOf(base) == nullptr) {
      group_->tenant(device == buffer_devices_.end() ? 0 : device->second).allocations.push_back({base, bytes});
    }
  }
  for (auto& [id, m] : modules_) {
    for (int d = 0; d < group_->size(); ++d) {
      driver::ContextScope scope(*driver_, group_->context(d));
      ZeroGlobals(m, d);
    }
    if (m.module != nullptr) group_->tenant(0).modules.push_back(m.module);
    for (auto& [device, module] : m.on_device) group_->tenant(device).modules.push_back(module);
  }
  for (auto& [hash, module] : preloaded_modules_) group_->tenant(0).modules.push_back(module);
  preloaded_modules_.clear();
  blas_.clear();
  events_.clear();
  streams_.clear();
  modules_.clear();
  buffer_devices_.clear();
}

}  // namespace phos::runtime
