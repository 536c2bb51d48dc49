// A session's kernels: module images arriving in chunks (loaded in device 0's context when the
// last one arrives, in another device's on its first launch there), kernel lookup by name, and
// launches whose every pointer-sized parameter word is checked against the session's memory.
// Attributes, occupancy, launches with attributes and module globals: session_functions.cc.
#include <algorithm>
#include <cstring>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/runtime/snapshot_restore.h"
#include "phos/store/chunk.h"
#include "session.h"

namespace phos::runtime {

CUresult Session::ModuleChunk(const ipc::ModuleChunkArgs& a, const Call& call) {
  if (a.module_id == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = call.tail.size();
  Module& m = modules_[a.module_id];
  if (m.module != nullptr || m.load_result != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;  // already loaded
  if (m.total_bytes == 0) {
    // module_bytes_ never exceeds the limit, so the subtraction cannot wrap.
    if (a.total_bytes == 0 || a.total_bytes > ipc::kMaxModuleBytes || a.total_bytes > rules_.module_bytes - module_bytes_ ||
        modules_.size() > rules_.modules) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: module of {} bytes refused (limits: {} per module, {} and {} modules per "
                         "session; {} bytes in {} held)",
                         pid_, a.total_bytes, ipc::kMaxModuleBytes, rules_.module_bytes, rules_.modules, module_bytes_,
                         modules_.size() - 1);
      modules_.erase(a.module_id);
      return CUDA_ERROR_INVALID_VALUE;
    }
    m.total_bytes = a.total_bytes;
    m.is_fatbin = a.is_fatbin != 0;
    module_bytes_ += a.total_bytes;
    module_order_.push_back(a.module_id);
    // No reserve(total_bytes): the image grows as its chunks arrive, so a size the peer claims
    // but never sends holds no memory.
  }
  if (a.offset != m.pending.size() || bytes > m.total_bytes - m.pending.size()) return CUDA_ERROR_INVALID_VALUE;
  m.pending.insert(m.pending.end(), call.tail.begin(), call.tail.end());
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
  if (restore_ != nullptr) restore_->NoteModuleLoaded();
  m.load_result = LoadModuleImage(m);
  if (m.load_result != CUDA_SUCCESS) {
    const char* name = nullptr;
    driver_->cuGetErrorName(m.load_result, &name);
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: {} module {} ({} bytes) did not load: {}; its kernels fail to launch with "
                       "cudaErrorNoKernelImageForDevice",
                       pid_, m.is_fatbin ? "fatbin" : "simgpu", a.module_id, m.total_bytes, name != nullptr ? name : "?");
    m.module = nullptr;
    // Nothing is kept of an image that did not load: its bytes count no more against the session.
    module_bytes_ -= m.total_bytes;
    m.pending = {};
    return CUDA_SUCCESS;
  }
  m.image = std::move(m.pending);
  m.pending = {};
  if (restore_ != nullptr && restore_->plan().manifest != nullptr) {
    // A snapshot's image that was not preloaded: its globals get their captured bytes here.
    const store::ChunkId id{m.hash.low, m.hash.high};
    for (const store::Module& snapshot : restore_->plan().manifest->modules) {
      if (snapshot.content_hash != id) continue;
      if (Status s = WriteModuleGlobals(driver_, snapshot, m.module); !s.ok()) {
        PHOS_LOG(Error, "restore", "pid {}: module {}: {}", pid_, a.module_id, s.message());
        return CUDA_ERROR_ILLEGAL_STATE;
      }
      break;
    }
  }
  // A module that fails to load is recorded, not reported: CUDA reports it at the launch.
  return CUDA_SUCCESS;
}

CUresult Session::LoadModuleImage(Module& m) {
  // NVIDIA's driver parses a fatbin and runs no host code of it. simgpu dlopens in this process
  // whatever it is given, whatever the tenant's flag says: on simgpu every image must be one phosd
  // trusts (docs/design.md D17), and the loader is told its size.
  const bool simulated = driver_->phosSimModuleLoadDataSized != nullptr;
  if (m.is_fatbin && !simulated) return driver_->cuModuleLoadData(&m.module, m.pending.data());
  if (rules_.trusted_modules != nullptr && !rules_.trusted_modules->Contains(m.pending.data(), m.pending.size())) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: a simgpu module image of {} bytes refused: it is not one phosd trusts",
                       pid_, m.pending.size());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (simulated) return driver_->phosSimModuleLoadDataSized(&m.module, m.pending.data(), m.pending.size());
  return driver_->cuModuleLoadData(&m.module, m.pending.data());
}

CUresult Session::ModuleLoadResult(const ipc::HandleArgs& a, const Call&) {
  auto it = modules_.find(a.handle);
  // A module still waiting for chunks has no result yet: no module the driver API could name.
  if (it == modules_.end() || (it->second.module == nullptr && it->second.load_result == CUDA_SUCCESS)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return it->second.load_result;
}

CUresult Session::ModuleUnload(const ipc::HandleArgs& a, const Call&) {
  auto it = modules_.find(a.handle);
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  Module& m = it->second;
  std::vector<std::pair<int, CUmodule>> loaded(m.on_device.begin(), m.on_device.end());
  if (m.module != nullptr) loaded.emplace_back(0, m.module);
  for (const auto& [device, module] : loaded) {
    Result<CUcontext> context = ContextOn(device);
    if (!context.ok()) return CUDA_ERROR_INVALID_CONTEXT;
    driver::ContextScope scope(*driver_, *context);
    // Kernels of the module may still be queued or running on any stream of the device: its code
    // and globals stay until they have finished (simgpu would unmap code a kernel runs).
    if (CUresult r = driver_->cuCtxSynchronize(); r != CUDA_SUCCESS) return r;
    ZeroGlobals(m, device);
    driver_->cuModuleUnload(module);
  }
  for (const auto& [key, global] : m.globals) globals_.Erase(global.address).IgnoreError();
  std::erase_if(functions_, [&](const auto& entry) { return entry.second.module_id == a.handle; });
  // A module that failed to load gave its bytes back then.
  if (m.load_result == CUDA_SUCCESS) module_bytes_ -= m.total_bytes;
  std::erase(module_order_, a.handle);
  modules_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Session::FunctionGet(const ipc::FunctionGetArgs& a, const Call& call) {
  if (a.name_bytes == 0 || a.name_bytes > ipc::kMaxNameBytes || a.name_bytes != call.tail.size()) return CUDA_ERROR_INVALID_VALUE;
  std::string name(reinterpret_cast<const char*>(call.tail.data()), a.name_bytes);
  uint64_t vid = 0;
  if (CUresult r = ResolveFunction(a.module_id, name, &vid); r != CUDA_SUCCESS) return r;
  const Function& fn = functions_.at(vid);
  ipc::FunctionInfo info{vid, static_cast<uint32_t>(fn.params.size()), fn.param_bytes};
  std::memcpy(call.reply, &info, sizeof(info));
  if (!fn.params.empty()) std::memcpy(call.reply + sizeof(info), fn.params.data(), fn.params.size() * sizeof(ipc::ParamSlot));
  *call.reply_len = sizeof(info) + fn.params.size() * sizeof(ipc::ParamSlot);
  return CUDA_SUCCESS;
}

CUresult Session::ResolveFunction(uint64_t module_id, const std::string& name, uint64_t* out) {
  CUfunction f = nullptr;
  CUresult r = CUDA_ERROR_NOT_FOUND;
  bool failed_module = false;
  uint64_t found_in = 0;
  for (uint64_t id : module_order_) {
    if (module_id != 0 && id != module_id) continue;
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
    CUresult out_result = failed_module ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_ERROR_NOT_FOUND;
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: kernel {} not found in the session's modules{}", pid_, name,
             failed_module ? " (a module of its registration failed to load on this device)" : "");
    return out_result;
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
  *out = NewHandle();
  functions_[*out] = std::move(fn);
  return CUDA_SUCCESS;
}

CUresult Session::PrepareLaunch(const ipc::LaunchArgs& a, std::span<const uint8_t> tail, uint8_t* params, void** args,
                                CUfunction* function, CUstream* stream) {
  auto it = functions_.find(a.function);
  if (it == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
  Function& fn = it->second;
  *function = fn.function;
  if (route_device_ != 0) {
    if (CUresult r = FunctionOn(fn, route_device_, function); r != CUDA_SUCCESS) return r;
  }
  if (a.param_bytes != fn.param_bytes || tail.size() != a.param_bytes) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> s = StreamOf(a.stream);
  if (!s.ok()) return CUDA_ERROR_INVALID_HANDLE;
  *stream = *s;
  // Our own copy: the checks below must see what the kernel will get.
  std::memcpy(params, tail.data(), a.param_bytes);
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ipc::ParamSlot& slot = fn.params[i];
    args[i] = params + slot.offset;
    // Every 8-byte word of a parameter that names device memory must name this session's own
    // (docs/design.md D8's rule for pointers and structs alike): a word inside no buffer or
    // module global of the session and outside the VA range of ours that the driver knows as an
    // allocation is someone else's memory.
    for (uint32_t off = (slot.offset + 7) / 8 * 8; off + 8 <= slot.offset + slot.size; off += 8) {
      uint64_t word;
      std::memcpy(&word, params + off, sizeof(word));
      if (word == 0 || buffers_.Contains(word, 0) || globals_.Contains(word, 0)) continue;
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
  return CUDA_SUCCESS;
}

CUresult Session::Launch(const ipc::LaunchArgs& a, const Call& call) {
  alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
  void* args[ipc::kMaxParams];
  CUfunction function = nullptr;
  CUstream stream = nullptr;
  if (CUresult r = PrepareLaunch(a, call.tail, params, args, &function, &stream); r != CUDA_SUCCESS) return r;
  return driver_->cuLaunchKernel(function, a.grid[0], a.grid[1], a.grid[2], a.block[0], a.block[1], a.block[2],
                                 a.shared_bytes, stream, args, nullptr);
}

}  // namespace phos::runtime
