// Allocation, copies and memsets. Host data never crosses the socket: host-to-device bytes ride
// in ring records, device-to-host bytes come back through the reply area, chunk by chunk.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

std::mutex g_mu;
struct Allocation {
  size_t bytes;
  int device;  // the session device it was made on
};
std::map<uintptr_t, Allocation> g_device;  // this process's device allocations, by base
std::set<void*> g_host;                // cudaMallocHost memory

}  // namespace

bool IsDevicePointer(const void* ptr) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(g_mu);
  auto it = g_device.upper_bound(p);
  if (it == g_device.begin()) return false;
  --it;
  return p < it->first + it->second.bytes;
}

size_t LiveDeviceAllocations() {
  std::lock_guard lock(g_mu);
  return g_device.size();
}

void ForgetDeviceAllocations(int device) {
  std::lock_guard lock(g_mu);
  std::erase_if(g_device, [device](const auto& entry) { return entry.second.device == device; });
}

}  // namespace phos::frontend

namespace {

using phos::frontend::g_device;
using phos::frontend::g_host;
using phos::frontend::g_mu;

// Host-to-device: chunks of at most a record's payload; with `sync`, the last waits.
CUresult CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream, bool sync) {
  Client& c = Client::Get();
  size_t chunk = c.max_payload();
  if (chunk == 0) return CUDA_ERROR_NO_DEVICE;
  chunk -= sizeof(ipc::CopyArgs);
  const auto* p = static_cast<const uint8_t*>(src);
  size_t offset = 0;
  do {
    size_t n = std::min(chunk, bytes - offset);
    bool last = offset + n == bytes;
    ipc::CopyArgs a{dst + offset, 0, n, stream};
    CUresult r = c.Call(ipc::Op::kMemcpyHtoD, &a, sizeof(a), p + offset, n, sync && last);
    if (r != CUDA_SUCCESS) return r;
    offset += n;
  } while (offset < bytes);
  return CUDA_SUCCESS;
}

CUresult CopyToHost(void* dst, uint64_t src, size_t bytes, uint64_t stream) {
  Client& c = Client::Get();
  size_t chunk = c.reply_capacity();
  if (chunk == 0) return CUDA_ERROR_NO_DEVICE;
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t offset = 0; offset < bytes; offset += chunk) {
    size_t n = std::min(chunk, bytes - offset);
    ipc::CopyArgs a{0, src + offset, n, stream};
    CUresult r = c.Call(ipc::Op::kMemcpyDtoH, &a, sizeof(a), nullptr, 0, true, p + offset, n);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

cudaError_t Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Return(cudaErrorInvalidValue);
  if (kind == cudaMemcpyDefault) {
    bool d = phos::frontend::IsDevicePointer(dst), s = phos::frontend::IsDevicePointer(src);
    kind = d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice) : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  uint64_t sid = StreamId(stream);
  auto dst_u = reinterpret_cast<uintptr_t>(dst);
  auto src_u = reinterpret_cast<uintptr_t>(src);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return Return(CopyToDevice(dst_u, src, bytes, async ? sid : 0, !async));
    case cudaMemcpyDeviceToHost:
      // The bytes must be in host memory when the reply comes back, so even the async form
      // waits (CUDA's asynchronous copies to pageable memory do too).
      return Return(CopyToHost(dst, src_u, bytes, async ? sid : 0));
    case cudaMemcpyDeviceToDevice: {
      ipc::CopyArgs a{dst_u, src_u, bytes, async ? sid : 0};
      return Return(Client::Get().Call(ipc::Op::kMemcpyDtoD, &a, sizeof(a), nullptr, 0, !async));
    }
    case cudaMemcpyHostToHost: {
      if (async) {
        ipc::HandleArgs a{sid};
        if (CUresult r = Client::Get().Call(ipc::Op::kStreamSynchronize, &a, sizeof(a), nullptr, 0, true); r != CUDA_SUCCESS) {
          return Return(r);
        }
      }
      std::memmove(dst, src, bytes);
      return cudaSuccess;
    }
    default:
      return Return(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t Memset(void* dst, int value, size_t bytes, cudaStream_t stream, bool async) {
  if (bytes == 0) return cudaSuccess;
  ipc::MemsetArgs a{reinterpret_cast<uintptr_t>(dst), bytes, async ? StreamId(stream) : 0,
                    static_cast<uint32_t>(value & 0xff), 0};
  return Return(Client::Get().Call(ipc::Op::kMemset, &a, sizeof(a), nullptr, 0, !async));
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  ipc::SizeArgs a{size};
  uint64_t out = 0;
  CUresult r = Client::Get().Call(ipc::Op::kMemAlloc, &a, sizeof(a), nullptr, 0, true, &out, sizeof(out));
  if (r != CUDA_SUCCESS) return Return(r == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : static_cast<cudaError_t>(r));
  *ptr = reinterpret_cast<void*>(out);
  std::lock_guard lock(g_mu);
  g_device[out] = {size, phos::frontend::ThreadDevice()};
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  ipc::PointerArgs a{reinterpret_cast<uintptr_t>(ptr)};
  CUresult r = Client::Get().Call(ipc::Op::kMemFree, &a, sizeof(a), nullptr, 0, true);
  if (r == CUDA_SUCCESS) {
    std::lock_guard lock(g_mu);
    g_device.erase(a.ptr);
  }
  return Return(r);
}

// Pinned host memory is process-local memory here: copies to and from it go through the ring as
// pageable copies do (docs/remoting.md, "Departures").
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  if ((flags & cudaHostAllocMapped) != 0) {
    return phos::frontend::NotSupported("cudaHostAlloc", "mapped pinned memory (cudaHostAllocMapped) is not remoted");
  }
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size == 0 ? 1 : size) != 0) return Return(cudaErrorMemoryAllocation);
  std::lock_guard lock(g_mu);
  g_host.insert(p);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard lock(g_mu);
    if (g_host.erase(ptr) == 0) return Return(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return Copy(dst, src, count, kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy(dst, src, count, kind, stream, true);
}

cudaError_t cudaMemset(void* dst, int value, size_t count) { return Memset(dst, value, count, nullptr, false); }

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return Memset(dst, value, count, stream, true);
}

}  // extern "C"
