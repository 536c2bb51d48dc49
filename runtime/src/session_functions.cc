// What a session's kernels report and accept beyond a plain launch: their attributes and
// settings, the occupancy calculator, launches with launch attributes, and the module globals
// the session's calls may then name like its buffers (docs/remoting.md, "Kernels").
#include <cstring>

#include "phos/base/enum_value.h"
#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {
namespace {

static_assert(CU_FUNC_ATTRIBUTE_MAX <= ipc::kFunctionAttributeSlots, "the wire record holds every attribute");
static_assert(sizeof(ipc::LaunchAttribute) == sizeof(CUlaunchAttribute) &&
                  offsetof(CUlaunchAttribute, value) == offsetof(ipc::LaunchAttribute, value),
              "launch attributes travel as CUlaunchAttribute lays them out");

// The attributes cuFuncSetAttribute accepts (cuda.h lists them); the others are read-only.
bool Settable(int attribute) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return true;
    default:
      return false;
  }
}

}  // namespace

CUresult Session::RoutedFunction(uint64_t vid, Function** fn, CUfunction* out) {
  auto it = functions_.find(vid);
  if (it == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *fn = &it->second;
  *out = it->second.function;
  return route_device_ == 0 ? CUDA_SUCCESS : FunctionOn(it->second, route_device_, out);
}

CUresult Session::FuncGetAttributes(const ipc::FunctionArgs& a, const Call& call) {
  Function* fn = nullptr;
  CUfunction f = nullptr;
  if (CUresult r = RoutedFunction(a.function, &fn, &f); r != CUDA_SUCCESS) return r;
  ipc::FunctionAttributes out{};
  for (uint32_t i = 0; i < ipc::kFunctionAttributeSlots; ++i) {
    out.results[i] = CUDA_ERROR_INVALID_VALUE;  // slots past CU_FUNC_ATTRIBUTE_MAX
    if (i >= CU_FUNC_ATTRIBUTE_MAX) continue;
    int value = 0;
    out.results[i] = driver_->cuFuncGetAttribute(&value, static_cast<CUfunction_attribute>(i), f);
    out.values[i] = out.results[i] == CUDA_SUCCESS ? value : 0;
  }
  call.Reply(out);
  return CUDA_SUCCESS;
}

CUresult Session::FuncSetAttribute(const ipc::FuncAttributeArgs& a, const Call&) {
  Function* fn = nullptr;
  CUfunction f = nullptr;
  if (CUresult r = RoutedFunction(a.function, &fn, &f); r != CUDA_SUCCESS) return r;
  if (!Settable(a.attribute)) return CUDA_ERROR_INVALID_VALUE;
  const auto attribute = static_cast<CUfunction_attribute>(a.attribute);
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    // The device's opt-in limit less the function's static shared memory (cuFuncSetAttribute).
    const int device = PhysicalDevice(route_device_);
    if (device < 0) return CUDA_ERROR_INVALID_DEVICE;
    int optin = 0, static_bytes = 0;
    if (CUresult r = driver_->cuDeviceGetAttribute(
            &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (CUresult r = driver_->cuFuncGetAttribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (a.value < 0 || a.value > optin - static_bytes) {
      PHOS_LOG_EVERY_SEC(
          Warn, "runtime", 1,
          "pid {}: {} refused: {} bytes of dynamic shared memory, the device allows {} with the opt-in "
          "(less {} static)",
          pid_, fn->name, a.value, optin, static_bytes);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // The first change on device 0 notes what it replaces (put back at the session's end).
  int before = 0;
  const bool note = route_device_ == 0 && !fn->attributes_before.contains(a.attribute) &&
                    driver_->cuFuncGetAttribute(&before, attribute, f) == CUDA_SUCCESS;
  if (CUresult r = driver_->cuFuncSetAttribute(f, attribute, a.value); r != CUDA_SUCCESS) return r;
  if (note) fn->attributes_before[a.attribute] = before;
  return CUDA_SUCCESS;
}

CUresult Session::FuncSetCacheConfig(const ipc::FuncCacheConfigArgs& a, const Call&) {
  Function* fn = nullptr;
  CUfunction f = nullptr;
  if (CUresult r = RoutedFunction(a.function, &fn, &f); r != CUDA_SUCCESS) return r;
  if (a.config < CU_FUNC_CACHE_PREFER_NONE || a.config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = driver_->cuFuncSetCacheConfig(f, static_cast<CUfunc_cache>(a.config)); r != CUDA_SUCCESS) return r;
  if (route_device_ == 0) fn->cache_config_set = true;
  return CUDA_SUCCESS;
}

CUresult Session::OccupancyMaxBlocks(const ipc::OccupancyArgs& a, const Call& call) {
  Function* fn = nullptr;
  CUfunction f = nullptr;
  if (CUresult r = RoutedFunction(a.function, &fn, &f); r != CUDA_SUCCESS) return r;
  if (a.block_size <= 0 || (a.flags & ~static_cast<uint32_t>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int blocks = 0;
  if (CUresult r = driver_->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
          &blocks, f, a.block_size, a.dynamic_smem_bytes, a.flags);
      r != CUDA_SUCCESS) {
    return r;
  }
  call.Reply(static_cast<int32_t>(blocks));
  return CUDA_SUCCESS;
}

CUresult Session::OccupancyDynamicSMem(const ipc::OccupancySMemArgs& a, const Call& call) {
  Function* fn = nullptr;
  CUfunction f = nullptr;
  if (CUresult r = RoutedFunction(a.function, &fn, &f); r != CUDA_SUCCESS) return r;
  if (a.blocks <= 0 || a.block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = 0;
  if (CUresult r = driver_->cuOccupancyAvailableDynamicSMemPerBlock(&bytes, f, a.blocks, a.block_size);
      r != CUDA_SUCCESS) {
    return r;
  }
  call.Reply(static_cast<uint64_t>(bytes));
  return CUDA_SUCCESS;
}

CUresult Session::LaunchEx(const ipc::LaunchExArgs& a, const Call& call) {
  if (a.attribute_count > ipc::kMaxLaunchAttributes) return CUDA_ERROR_INVALID_VALUE;
  const size_t attribute_bytes = a.attribute_count * sizeof(ipc::LaunchAttribute);
  if (call.tail.size() < attribute_bytes) return CUDA_ERROR_INVALID_VALUE;
  // Our own copy of the attributes, as of the parameters (PrepareLaunch): what is checked is what
  // the driver gets.
  CUlaunchAttribute attributes[ipc::kMaxLaunchAttributes];
  std::memcpy(attributes, call.tail.data(), attribute_bytes);
  alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
  void* args[ipc::kMaxParams];
  CUfunction function = nullptr;
  CUstream stream = nullptr;
  if (CUresult r =
          PrepareLaunch(a.launch, call.tail.subspan(attribute_bytes), params, args, &function, &stream);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (uint32_t i = 0; i < a.attribute_count; ++i) {
    CUlaunchAttribute& attribute = attributes[i];
    // The id as the tenant wrote it: any integer, read through its bytes until checked.
    switch (EnumValue(attribute.id)) {
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
        // The function's virtual event, which must be of the launch's device.
        CUevent& event = attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
                             ? attribute.value.programmaticEvent.event
                             : attribute.value.launchCompletionEvent.event;
        auto it = events_.find(reinterpret_cast<uintptr_t>(event));
        if (it == events_.end() || it->second.device != route_device_) return CUDA_ERROR_INVALID_HANDLE;
        event = it->second.event;
        break;
      }
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
        // A hint about memory, but memory the function must own like any it names.
        const CUaccessPolicyWindow& window = attribute.value.accessPolicyWindow;
        const auto base = reinterpret_cast<uintptr_t>(window.base_ptr);
        if (window.num_bytes != 0 && !Owns(base, window.num_bytes, "access policy window")) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        break;
      }
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        // Refused by the frontend too (cudaLaunchCooperativeKernel): a grid-wide barrier has no
        // simgpu counterpart, and a function must run the same on both.
        if (attribute.value.cooperative != 0) return CUDA_ERROR_NOT_SUPPORTED;
        break;
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        // Plain numbers: the driver checks them, and refuses what it does not honour.
        break;
      default:
        // A device-updatable kernel node is graphs only ("passing it to a launch in a non-capturing
        // stream results in an error") and would carry a device node handle back; an id this build
        // does not know may hold anything, pointers included, that nobody here has checked.
        PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: launch refused: launch attribute {} is not served",
                           pid_, EnumValue(attribute.id));
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const ipc::LaunchArgs& l = a.launch;
  CUlaunchConfig config{};
  config.gridDimX = l.grid[0];
  config.gridDimY = l.grid[1];
  config.gridDimZ = l.grid[2];
  config.blockDimX = l.block[0];
  config.blockDimY = l.block[1];
  config.blockDimZ = l.block[2];
  config.sharedMemBytes = l.shared_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = a.attribute_count;
  return driver_->cuLaunchKernelEx(&config, function, args, nullptr);
}

CUresult Session::ModuleGlobalGet(const ipc::FunctionGetArgs& a, const Call& call) {
  if (a.name_bytes == 0 || a.name_bytes > ipc::kMaxNameBytes || a.name_bytes != call.tail.size()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::string name(reinterpret_cast<const char*>(call.tail.data()), a.name_bytes);
  if (name.find('\0') != std::string::npos) return CUDA_ERROR_INVALID_VALUE;
  for (uint64_t id : module_order_) {
    if (a.module_id != 0 && id != a.module_id) continue;
    Module& m = modules_[id];
    if (m.module == nullptr) continue;
    CUmodule module = nullptr;
    if (CUresult r = ModuleOn(m, route_device_, &module); r != CUDA_SUCCESS) return r;
    CUdeviceptr address = 0;
    size_t bytes = 0;
    CUresult r = driver_->cuModuleGetGlobal(&address, &bytes, module, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) continue;
    if (r != CUDA_SUCCESS) return r;
    const auto key = std::make_pair(route_device_, name);
    if (!m.globals.contains(key)) {
      // A global of another module may not overlap it; the driver's word is trusted this far.
      if (!globals_.Insert(address, bytes).ok()) return CUDA_ERROR_INVALID_VALUE;
      m.globals[key] = Global{address, bytes};
    }
    call.Reply(ipc::GlobalInfo{address, bytes});
    return CUDA_SUCCESS;
  }
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: module global '{}' not found in the session's modules",
                     pid_, name);
  return CUDA_ERROR_NOT_FOUND;
}

void Session::RestoreFunctionAttributes() {
  for (auto& [vid, fn] : functions_) {
    for (const auto& [attribute, value] : fn.attributes_before) {
      driver_->cuFuncSetAttribute(fn.function, static_cast<CUfunction_attribute>(attribute), value);
    }
    fn.attributes_before.clear();
    // A loaded module's kernels start with no cache preference (cuFuncSetCacheConfig's default).
    if (fn.cache_config_set) driver_->cuFuncSetCacheConfig(fn.function, CU_FUNC_CACHE_PREFER_NONE);
    fn.cache_config_set = false;
  }
}

void Session::ZeroGlobals(const Module& m, int device) {
  bool zeroed = false;
  for (const auto& [key, global] : m.globals) {
    if (key.first != device) continue;
    driver_->cuMemsetD8(global.address, 0, global.bytes);
    zeroed = true;
  }
  // A set of device memory may return before it ran: it must finish before the caller unloads
  // the module (simgpu unmaps its globals) or hands it to the next tenant.
  if (zeroed) driver_->cuCtxSynchronize();
}

}  // namespace phos::runtime
