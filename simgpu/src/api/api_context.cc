// Contexts, the per-thread current-context stack and peer access between contexts.
#include "api/driver.h"

using namespace phos::sim;

namespace {

constexpr unsigned kKnownContextFlags = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                                        CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                                        CU_CTX_SYNC_MEMOPS;

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                          CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~kKnownContextFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Execution affinity (MPS SM partitions) and CIG (graphics interop) are not modelled.
  if (params != nullptr && (params->numExecAffinityParams > 0 || params->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUcontext ctx = nullptr;
  if (CUresult r = d->CreateContext(device, /*primary=*/false, &ctx); r != CUDA_SUCCESS) return r;
  ThreadContextStack().push_back(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> c = d->contexts.Find(ctx);
  // A primary context is released with cuDevicePrimaryCtxRelease, never destroyed directly.
  if (c && c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  return d->DestroyContext(ctx);
}

PHOS_SIM_API CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (!d->contexts.Find(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  ThreadContextStack().push_back(ctx);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  auto& stack = ThreadContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  auto& stack = ThreadContextStack();
  if (ctx == nullptr) {
    // "If ctx is NULL then the CUDA context previously bound to the calling CPU thread is
    // unbound."
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!d->contexts.Find(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  const auto& stack = ThreadContextStack();
  *pctx = stack.empty() ? nullptr : stack.back();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  CUresult r = RequireContext(&d, &ctx);
  if (ctx == nullptr) return r;
  *device = ctx->device->ordinal;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (d->device(dev) == nullptr || d->device(peerDev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  // Kernels and copies of any device reach every device's memory (one address space on the host);
  // a device is not its own peer.
  *canAccessPeer = dev != peerDev ? 1 : 0;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> peer = d->contexts.Find(peerContext);
  if (!peer || peer == ctx) return CUDA_ERROR_INVALID_CONTEXT;
  // cuDeviceCanAccessPeer says 0 for a context's own device.
  if (peer->device == ctx->device) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  std::lock_guard lock(ctx->peers_mu);
  return ctx->peers.insert(peer->id).second ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Context> peer = d->contexts.Find(peerContext);
  if (!peer) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard lock(ctx->peers_mu);
  return ctx->peers.erase(peer->id) == 1 ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxSynchronize(void) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  return ctx->exec->Synchronize();
}

}  // extern "C"
