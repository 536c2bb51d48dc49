// Module globals (__device__ and __constant__ variables): nvcc's code registers each with its
// host shadow (__cudaRegisterVar); a g++-built function's host object names its variable by its
// exported symbol (dladdr), as its kernels are named. A symbol's address and size in the calling
// thread's device's instance of its module come from phosd once per session
// (kModuleGlobalGet); copies to and from it are ordinary device copies, which phosd checks
// against the globals the session resolved as it checks them against its buffers.
// Managed memory (__managed__ variables, cudaMallocManaged) is refused.
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::Return;
namespace ipc = phos::ipc;

namespace {

struct RegisteredVar {
  uint64_t module_id;  // 0: the fatbin could not be sized, so its variables have no module
  std::string name;
};

struct Symbol {
  uint64_t address = 0;
  uint64_t bytes = 0;
};

std::mutex g_mu;
std::map<const void*, RegisteredVar> g_vars;              // host shadow -> device name
std::map<std::pair<const void*, int>, Symbol> g_symbols;  // (host shadow, device) -> global
std::map<uint64_t, uint64_t> g_ranges;                    // resolved globals: address -> bytes

// The global `symbol` names on the calling thread's device.
cudaError_t Resolve(const void* symbol, Symbol* out) {
  if (symbol == nullptr) return cudaErrorInvalidSymbol;
  const std::pair<const void*, int> key{symbol, phos::frontend::ThreadDevice()};
  uint64_t module_id = 0;
  std::string name;
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_symbols.find(key); it != g_symbols.end()) {
      *out = it->second;
      return cudaSuccess;
    }
    if (auto it = g_vars.find(symbol); it != g_vars.end()) {
      if (it->second.module_id == 0) return cudaErrorInvalidSymbol;
      module_id = it->second.module_id;
      name = it->second.name;
    }
  }
  if (name.empty()) {
    Dl_info info{};
    if (dladdr(symbol, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != symbol)
      return cudaErrorInvalidSymbol;
    name = info.dli_sname;
  }
  Client& c = Client::Get();
  if (CUresult r = c.FlushModules(); r != CUDA_SUCCESS) return static_cast<cudaError_t>(r);
  ipc::FunctionGetArgs a{module_id, static_cast<uint32_t>(name.size()), 0};
  ipc::GlobalInfo info{};
  CUresult r =
      c.Call(ipc::Op::kModuleGlobalGet, &a, sizeof(a), name.data(), name.size(), true, &info, sizeof(info));
  if (r == CUDA_ERROR_NOT_FOUND) return cudaErrorInvalidSymbol;
  if (r != CUDA_SUCCESS) return static_cast<cudaError_t>(r);
  std::lock_guard lock(g_mu);
  Symbol& symbol_entry = g_symbols[key];
  symbol_entry = Symbol{info.address, info.bytes};
  g_ranges[info.address] = info.bytes;
  *out = symbol_entry;
  return cudaSuccess;
}

// `count` bytes at `offset` of the global, which must hold them.
cudaError_t Span(const void* symbol, size_t count, size_t offset, uint64_t* address) {
  Symbol s;
  if (cudaError_t e = Resolve(symbol, &s); e != cudaSuccess) return e;
  if (offset > s.bytes || count > s.bytes - offset) return cudaErrorInvalidValue;
  *address = s.address + offset;
  return cudaSuccess;
}

// The copy's direction towards (`to_symbol`) or from the global: the global is device memory, the
// other side is what `kind` says (cudaMemcpyDefault: what its pointer is).
cudaError_t Direction(bool to_symbol, const void* other, cudaMemcpyKind kind, cudaMemcpyKind* out) {
  if (kind == cudaMemcpyDefault) {
    const bool device = phos::frontend::FindDeviceAllocation(other, nullptr, nullptr) ||
                        phos::frontend::IsSymbolAddress(other);
    kind = device ? cudaMemcpyDeviceToDevice : (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  }
  const bool allowed = to_symbol ? (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice)
                                 : (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
  if (!allowed) return cudaErrorInvalidMemcpyDirection;
  *out = kind;
  return cudaSuccess;
}

cudaError_t CopyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                         cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  uint64_t address = 0;
  if (cudaError_t e = Span(symbol, count, offset, &address); e != cudaSuccess) return Return(e);
  if (cudaError_t e = Direction(true, src, kind, &kind); e != cudaSuccess) return Return(e);
  void* dst = reinterpret_cast<void*>(address);
  return async ? cudaMemcpyAsync(dst, src, count, kind, stream) : cudaMemcpy(dst, src, count, kind);
}

cudaError_t CopyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind,
                           cudaStream_t stream, bool async) {
  uint64_t address = 0;
  if (cudaError_t e = Span(symbol, count, offset, &address); e != cudaSuccess) return Return(e);
  if (cudaError_t e = Direction(false, dst, kind, &kind); e != cudaSuccess) return Return(e);
  const void* src = reinterpret_cast<const void*>(address);
  return async ? cudaMemcpyAsync(dst, src, count, kind, stream) : cudaMemcpy(dst, src, count, kind);
}

}  // namespace

namespace phos::frontend {

void ForgetSessionSymbols() {
  std::lock_guard lock(g_mu);
  g_symbols.clear();
  g_ranges.clear();
}

bool IsSymbolAddress(const void* ptr) {
  const auto p = reinterpret_cast<uint64_t>(ptr);
  std::lock_guard lock(g_mu);
  auto it = g_ranges.upper_bound(p);
  if (it == g_ranges.begin()) return false;
  --it;
  return p - it->first < it->second;
}

}  // namespace phos::frontend

extern "C" {

void __cudaRegisterVar(void** handle, char* host_var, char* /*device_address*/, const char* device_name,
                       int /*ext*/, size_t /*size*/, int /*constant*/, int /*global*/) {
  if (handle == nullptr || host_var == nullptr || device_name == nullptr) return;
  std::lock_guard lock(g_mu);
  g_vars[host_var] = RegisteredVar{phos::frontend::FatbinModule(handle), device_name};
}

// A __managed__ variable's registration cannot fail visibly (it returns nothing, before main):
// the variable stays unregistered, the refusal is logged and is the thread's last error.
void __cudaRegisterManagedVar(void** /*handle*/, void** /*host_var_ptr*/, char* /*device_address*/,
                              const char* device_name, int, size_t, int, int) {
  PHOS_LOG(Error, "frontend",
           "__managed__ variable '{}': managed memory is not served; the variable stays unusable",
           device_name != nullptr ? device_name : "?");
  phos::frontend::NotSupported("__cudaRegisterManagedVar",
                               "managed memory (__managed__ variables) is not served");
}

cudaError_t cudaMallocManaged(void** ptr, size_t, unsigned int) {
  if (ptr != nullptr) *ptr = nullptr;
  return phos::frontend::NotSupported("cudaMallocManaged", "managed memory is not served");
}

// Advice and prefetches concern managed memory, and phos has none (cudaMallocManaged is refused):
// every pointer is one the driver refuses them for, with cudaErrorInvalidValue.
cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, cudaMemLocation) {
  return phos::frontend::Return(cudaErrorInvalidValue);
}

cudaError_t cudaMemPrefetchAsync(const void*, size_t, cudaMemLocation, unsigned int, cudaStream_t) {
  return phos::frontend::Return(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               cudaMemcpyKind kind) {
  return CopyToSymbol(symbol, src, count, offset, kind, nullptr, false);
}

cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                    cudaMemcpyKind kind, cudaStream_t stream) {
  return CopyToSymbol(symbol, src, count, offset, kind, stream, true);
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 cudaMemcpyKind kind) {
  return CopyFromSymbol(dst, symbol, count, offset, kind, nullptr, false);
}

cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      cudaMemcpyKind kind, cudaStream_t stream) {
  return CopyFromSymbol(dst, symbol, count, offset, kind, stream, true);
}

cudaError_t cudaGetSymbolAddress(void** ptr, const void* symbol) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  Symbol s;
  if (cudaError_t e = Resolve(symbol, &s); e != cudaSuccess) return Return(e);
  *ptr = reinterpret_cast<void*>(s.address);
  return cudaSuccess;
}

cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (size == nullptr) return Return(cudaErrorInvalidValue);
  Symbol s;
  if (cudaError_t e = Resolve(symbol, &s); e != cudaSuccess) return Return(e);
  *size = s.bytes;
  return cudaSuccess;
}

}  // extern "C"
