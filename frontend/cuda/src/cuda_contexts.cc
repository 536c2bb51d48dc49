// Initialization, primary contexts and the context stack of the driver API frontend. phos serves
// one context per device, the primary context, shared with the runtime API: a context handle is
// phos's name for a session device's primary context, and making one current selects that device
// for the thread's runtime calls too (cudaSetDevice). cuCtxCreate is refused (docs/decisions.md,
// "One session for both APIs"): a created context would need an address space and modules of its
// own, which a session does not have.
#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "cuda_internal.h"

namespace ipc = phos::ipc;

namespace phos::frontend::driver {
namespace {

// ipc::kMaxNcclRanks devices is the most a session may be given.
constexpr int kMaxDevices = ipc::kMaxNcclRanks;

struct PrimaryContextState {
  unsigned retained = 0;  // cuDevicePrimaryCtxRetain less cuDevicePrimaryCtxRelease
};

std::atomic<bool> g_initialized{false};
std::mutex g_mu;
std::array<PrimaryContextState, kMaxDevices> g_primary;

// The thread's context stack once it used cuCtxSetCurrent, cuCtxPushCurrent or cuCtxPopCurrent;
// before, the thread's current context is its device's primary context.
thread_local bool t_bound = false;
thread_local std::vector<CUcontext> t_stack;

// The thread's stack, taken over from the implicit current context on first use.
std::vector<CUcontext>& Stack() {
  if (!t_bound) {
    t_bound = true;
    t_stack.assign(1, PrimaryContext(ThreadDevice()));
  }
  return t_stack;
}

// The context now on top of the thread's stack selects its device for the thread.
CUresult Follow() {
  if (t_stack.empty() || t_stack.back() == nullptr) return CUDA_SUCCESS;
  const int device = ContextDevice(t_stack.back());
  return device == ThreadDevice() ? CUDA_SUCCESS : SelectDevice(device);
}

// The device a primary-context call names: CUDA_ERROR_INVALID_DEVICE for one the session lacks.
CUresult CheckDevice(CUdevice device) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  int count = 0;
  if (CUresult r = SessionDeviceCount(&count); r != CUDA_SUCCESS) return r;
  return device < 0 || device >= count || device >= kMaxDevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

}  // namespace

bool Initialized() { return g_initialized.load(); }

CUcontext PrimaryContext(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return reinterpret_cast<CUcontext>(&g_primary[device]);
}

int ContextDevice(CUcontext context) {
  const auto* p = reinterpret_cast<const PrimaryContextState*>(context);
  if (p < g_primary.data() || p >= g_primary.data() + kMaxDevices) return -1;
  return static_cast<int>(p - g_primary.data());
}

CUcontext CurrentContext() {
  if (!t_bound) return PrimaryContext(ThreadDevice());
  return t_stack.empty() ? nullptr : t_stack.back();
}

CUresult NeedContext() {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return CurrentContext() == nullptr ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

}  // namespace phos::frontend::driver

using namespace phos::frontend::driver;  // NOLINT(google-build-using-namespace): this file's own
using phos::frontend::SessionDeviceCount;

extern "C" {

// The session opens here: a program without phosd learns it has no device, as without a GPU.
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int count = 0;
  if (CUresult r = SessionDeviceCount(&count); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_ERROR_NO_DEVICE;
  g_initialized.store(true);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(device); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  ++g_primary[device].retained;
  *context = PrimaryContext(device);
  return CUDA_SUCCESS;
}

// The last release leaves the context to the runtime, which phos's session holds for the life of
// the process: nothing is freed until cuDevicePrimaryCtxReset or the process's end.
CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  if (CUresult r = CheckDevice(device); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  if (g_primary[device].retained == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --g_primary[device].retained;
  return CUDA_SUCCESS;
}

// Active: retained, or device 0's, which phosd made when the session opened.
CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(device); r != CUDA_SUCCESS) return r;
  if (CUresult r = phos::frontend::DeviceFlags(device, flags); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  *active = g_primary[device].retained > 0 || device == 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// CU_CTX_SCHED_* and the other context flags are the runtime's cudaDevice* flags, value for value.
CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  if (CUresult r = CheckDevice(device); r != CUDA_SUCCESS) return r;
  return phos::frontend::SetDeviceFlags(device, flags);
}

// cudaDeviceReset of `device`: what the session made there is freed.
CUresult cuDevicePrimaryCtxReset(CUdevice device) {
  if (CUresult r = CheckDevice(device); r != CUDA_SUCCESS) return r;
  const int before = phos::frontend::ThreadDevice();
  if (CUresult r = phos::frontend::SelectDevice(device); r != CUDA_SUCCESS) return r;
  CUresult reset = phos::frontend::ResetDevice();
  CUresult back = phos::frontend::SelectDevice(before);
  return reset != CUDA_SUCCESS ? reset : back;
}

CUresult cuCtxGetCurrent(CUcontext* context) {
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  *context = CurrentContext();
  return CUDA_SUCCESS;
}

// Replaces the top of the thread's stack; null unbinds it.
CUresult cuCtxSetCurrent(CUcontext context) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (context != nullptr && ContextDevice(context) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<CUcontext>& stack = Stack();
  if (context == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return Follow();
  }
  if (stack.empty()) {
    stack.push_back(context);
  } else {
    stack.back() = context;
  }
  return Follow();
}

CUresult cuCtxPushCurrent(CUcontext context) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (context == nullptr || ContextDevice(context) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  Stack().push_back(context);
  return Follow();
}

CUresult cuCtxPopCurrent(CUcontext* context) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::vector<CUcontext>& stack = Stack();
  if (stack.empty() || stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context != nullptr) *context = stack.back();
  stack.pop_back();
  return Follow();
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  *device = ContextDevice(CurrentContext());
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  return phos::frontend::Client::Get().Call(phos::ipc::Op::kDeviceSynchronize, nullptr, 0, nullptr, 0, true);
}

// Refused (frontend/surface/refused.tsv): a context of its own would need an address space and
// modules of its own; the primary context (cuDevicePrimaryCtxRetain) is the one phos serves.
CUresult cuCtxCreate(CUcontext* context, CUctxCreateParams* /*params*/, unsigned int /*flags*/, CUdevice /*device*/) {
  if (context != nullptr) *context = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The forms cuda.h's macros no longer name, whose arguments are those of the current ones.
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxSetFlags
#undef cuDevicePrimaryCtxReset
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
CUresult cuDevicePrimaryCtxRelease(CUdevice device) { return cuDevicePrimaryCtxRelease_v2(device); }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}
CUresult cuDevicePrimaryCtxReset(CUdevice device) { return cuDevicePrimaryCtxReset_v2(device); }
CUresult cuCtxPushCurrent(CUcontext context) { return cuCtxPushCurrent_v2(context); }
CUresult cuCtxPopCurrent(CUcontext* context) { return cuCtxPopCurrent_v2(context); }

}  // extern "C"
