// Shared by the frontend CUDA runtime's translation units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "client.h"

// nvcc's launch entry point (crt/device_functions.h, which only nvcc's compilation includes),
// exported by cudart_launch.cc.
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                          cudaStream_t stream);

namespace phos::frontend {

// Records a failure as the thread's last error (cudaGetLastError) and returns it. CUresult and
// cudaError_t agree numerically on every error the server returns.
cudaError_t Return(CUresult result);
cudaError_t Return(cudaError_t error);
// Logs, once per call site, that an exported call cannot be served; returns cudaErrorNotSupported.
cudaError_t NotSupported(const char* call, const char* why);

// How phosd names `stream` (cudart_streams.cc): cudaStreamPerThread is the calling thread's default
// stream on its device, made on first use; any other stream its own handle (0 and
// cudaStreamLegacy: the legacy stream).
CUresult StreamId(cudaStream_t stream, uint64_t* out);
// The stream the _ptds / _ptsz entry points (cudart_ptds.cc) mean by `stream`: 0 is the calling
// thread's default stream there.
inline cudaStream_t PerThreadDefault(cudaStream_t stream) { return stream == nullptr ? cudaStreamPerThread : stream; }
// cudaDeviceReset destroyed `device`'s streams: every thread makes its default stream there anew.
void ForgetDefaultStreams(int device);

// A device allocation this process made (cudart_memory.cc).
struct DeviceAllocation {
  size_t bytes;
  int device;   // the session device it was made on
  bool pooled;  // by cudaMallocAsync / cudaMallocFromPoolAsync: counted in its device's pool
};
// The direction of a copy: `kind` itself, or for cudaMemcpyDefault the one its pointers say (a
// pointer into a device allocation this process made, or into a module global it resolved, is
// device memory, any other host memory).
cudaMemcpyKind ResolveCopyKind(void* dst, const void* src, cudaMemcpyKind kind);
// The allocation holding `ptr`, with its base; false when none does.
bool FindDeviceAllocation(const void* ptr, uintptr_t* base, DeviceAllocation* out);
// Allocates `bytes` on the thread's device (kMemAlloc) and records it.
CUresult AllocateDevice(size_t bytes, bool pooled, uint64_t* out);
// Forgets the allocation at `base` (freed); false when there is none.
bool ForgetDeviceAllocation(uintptr_t base, DeviceAllocation* out);
// A pooled allocation of `bytes` on `device` was freed (cudart_pools.cc).
void PoolReleased(int device, size_t bytes);
// Copies through the ring, chunk by chunk (cudart_memory.cc). `stream` 0 is the legacy default
// stream; CopyToDevice with `sync` waits for the last chunk.
CUresult CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream, bool sync);
CUresult CopyToHost(void* dst, uint64_t src, size_t bytes, uint64_t stream);
// cudaFree: frees the allocation at `ptr` in phosd and forgets it (0: nothing to free).
CUresult FreeDevice(uintptr_t ptr);
// Pinned host memory as cudaHostAlloc makes it (process memory phos counts as pinned; `flags`
// kept for cudaHostGetFlags) and cudaFreeHost frees it (CUDA_ERROR_INVALID_VALUE for anything else).
CUresult AllocateHost(size_t bytes, unsigned flags, void** out);
CUresult FreeHost(void* ptr);
// A host range phos counts as pinned: cudaHostAlloc memory or a cudaHostRegister range.
struct HostRangeInfo {
  uintptr_t base;
  size_t bytes;
  int device;       // current when it was allocated or registered
  bool registered;  // by cudaHostRegister
  unsigned flags;   // cudaHostAlloc's or cudaHostRegister's
};
// The range holding `ptr`; false when none does.
bool FindHostRange(const void* ptr, HostRangeInfo* out);
// The device allocations this process holds (cudart_memory.cc).
size_t LiveDeviceAllocations();
// Forgets the allocations made on session device `device`, which cudaDeviceReset freed.
void ForgetDeviceAllocations(int device);
// The session's device count, asked once (cudart_device.cc).
CUresult SessionDeviceCount(int* count);
// A copy of what the session told about `device` (CUDA_ERROR_INVALID_DEVICE for an ordinal it
// does not have).
CUresult CopyDeviceProperties(int device, ipc::DeviceProperties* out);
// The flags of `device`'s primary context (cudaSetDeviceFlags, cuDevicePrimaryCtxSetFlags).
CUresult DeviceFlags(int device, unsigned* flags);
CUresult SetDeviceFlags(int device, unsigned flags);
// cudaDeviceReset: what the session made on the calling thread's device is freed.
CUresult ResetDevice();
// cudaSetDevice: the calling thread's device, once phosd has it (cudart_api.cc).
CUresult SelectDevice(int device);
// Forgets what the session told about its devices: a forked child's session may have others.
void ForgetSessionDevices();
// Forgets the server's kernel handles, which belong to the session that issued them (cudart_launch.cc).
void ForgetSessionKernels();
// Stops the host-function thread when no host function is pending; returns how many are
// (cudart_host_functions.cc).
size_t QuiesceHostFunctions();
// Before host bytes are read for a copy to the device on `stream`: when host functions are
// pending, waits for the stream, so that the bytes are those its host functions wrote, as CUDA
// synchronises the stream before a copy from pageable memory (cudart_host_functions.cc).
CUresult AwaitHostFunctions(uint64_t stream);
// After phosd answered a call: what host functions that returned before it wrote is ordered before
// the caller's next reads in this process too. phosd's answer orders them already (a function's
// return reaches phosd before the stream goes on), but through memory shared with another process,
// where a race detector cannot follow; this takes the functions' lock, under which each return is
// posted (cudart_host_functions.cc). Nothing when no host function was ever launched.
void OrderAfterHostFunctions();
// A graph launch's host nodes: a slot for each function, in order, or none when fewer are free;
// slots whose launch record was not sent go back (cudart_host_functions.cc).
cudaError_t TakeHostFnSlots(const std::vector<cudaHostNodeParams>& fns, std::vector<uint32_t>* slots);
void ReturnHostFnSlots(const std::vector<uint32_t>& slots);
// cudaLaunchHostFunc on a capturing stream: the function becomes a host node of the capture's
// graph, and *captured says so; *captured is false for a stream that is not capturing
// (cudart_capture.cc).
cudaError_t CaptureHostFunc(cudaStream_t stream, const cudaHostNodeParams& fn, bool* captured);
// The host nodes' functions, which stay in this process: by graph or executable graph and node
// index (cudart_graph_hosts.cc). phosd's host node carries nothing.
void RecordHostNode(uint64_t owner, uint32_t node, const cudaHostNodeParams& fn);
// `to`'s host nodes become `from`'s (a clone, an instantiation).
void CopyHostNodes(uint64_t from, uint64_t to);
void ForgetHostNodes(uint64_t owner);
void ForgetHostNode(uint64_t owner, uint32_t node);
// `owner`'s host nodes' functions in node index order, the order a graph launch lists their slots.
std::vector<cudaHostNodeParams> HostNodesOf(uint64_t owner);

// A kernel as the session knows it (cudart_launch.cc): its server function id and parameter layout.
struct KernelRef {
  uint64_t function = 0;
  uint32_t param_bytes = 0;
  std::vector<ipc::ParamSlot> params;
  std::string name;  // mangled, as nvcc names it
};
// The kernel `func` names: a host stub registered by nvcc's code (__cudaRegisterFunction), a
// cudaKernel_t this runtime handed out (the same pointer), or an exported host function whose
// symbol is the kernel's name (g++-built functions). Asks phosd the first time in a session; the
// function's settings made earlier on the calling thread's device are applied then
// (ApplyFunctionSettings). cudaErrorInvalidDeviceFunction for anything else,
// cudaErrorNoKernelImageForDevice when its module did not load.
cudaError_t ResolveKernel(const void* func, KernelRef* out);
// Asks phosd for kernel `name` in module `module_id` (0: any module of the session) once the
// modules are sent: its server function id and parameter layout.
CUresult FetchKernel(uint64_t module_id, const std::string& name, KernelRef* out);
// The parameter buffer of a launch of `k` (k.param_bytes bytes), each argument of `args` copied to
// its offset; false when the kernel takes arguments and none were given.
bool PackArguments(const KernelRef& k, void** args, uint8_t* buffer);
// The stream capture that `stream` (a virtual stream) takes part in, as the frontend knows it
// (cudart_capture.cc): a call the calling thread's capture mode prohibits while a capture is in
// progress returns cudaErrorStreamCaptureUnsupported and invalidates the captures that prohibit
// it, as NVIDIA's runtime does. `call` names it in the log.
cudaError_t CaptureProhibits(const char* call);
// The module a fatbin handle of __cudaRegisterFatBinary loaded as; 0 when it was not a fatbin
// the frontend could size.
uint64_t FatbinModule(void** handle);

// cudart_functions.cc: what cudaFuncSetAttribute and cudaFuncSetCacheConfig set, per kernel and
// device, is sent again when a new session (a forked instance's) first uses the kernel on that
// device: a restored instance's kernels keep the settings its snapshot's process made.
void ApplyFunctionSettings(const void* func, const KernelRef& kernel);
// The new session has applied none of them yet.
void ForgetAppliedSettings();

// cudart_symbols.cc: module globals' addresses, asked of phosd once per session and device.
void ForgetSessionSymbols();
// Whether `ptr` lies in a module global the session resolved (device memory for
// cudaMemcpyDefault, as device allocations are).
bool IsSymbolAddress(const void* ptr);

}  // namespace phos::frontend
