// Allocation, copies and memsets. Host data never crosses the socket: host-to-device bytes ride
// in ring records, device-to-host bytes come back through the reply area, chunk by chunk.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

std::mutex g_mu;
std::map<uintptr_t, DeviceAllocation> g_device;  // this process's device allocations, by base
// Host memory phos counts as pinned, by base: cudaMallocHost / cudaHostAlloc memory and
// cudaHostRegister ranges. Copies to and from it go through the ring as pageable ones do.
struct HostRange {
  size_t bytes;
  int device;       // current when it was allocated or registered (cudaPointerGetAttributes)
  bool registered;  // cudaHostRegister (else allocated by cudaHostAlloc)
  unsigned flags;   // cudaHostAlloc's (cudaHostGetFlags), or cudaHostRegister's
};
std::map<uintptr_t, HostRange> g_host;

// The entry of `map` whose [base, base + bytes) holds `p`, or end(). Caller holds g_mu.
template <typename Map>
auto Holding(Map& map, uintptr_t p) {
  auto it = map.upper_bound(p);
  if (it == map.begin()) return map.end();
  --it;
  return p - it->first < it->second.bytes ? it : map.end();
}

}  // namespace

bool FindDeviceAllocation(const void* ptr, uintptr_t* base, DeviceAllocation* out) {
  std::lock_guard lock(g_mu);
  auto it = Holding(g_device, reinterpret_cast<uintptr_t>(ptr));
  if (it == g_device.end()) return false;
  if (base != nullptr) *base = it->first;
  if (out != nullptr) *out = it->second;
  return true;
}

cudaMemcpyKind ResolveCopyKind(void* dst, const void* src, cudaMemcpyKind kind) {
  if (kind != cudaMemcpyDefault) return kind;
  const bool d = FindDeviceAllocation(dst, nullptr, nullptr) || IsSymbolAddress(dst);
  const bool s = FindDeviceAllocation(src, nullptr, nullptr) || IsSymbolAddress(src);
  return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice) : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

CUresult AllocateDevice(size_t bytes, bool pooled, uint64_t* out) {
  ipc::SizeArgs a{bytes};
  CUresult r = Client::Get().Call(ipc::Op::kMemAlloc, &a, sizeof(a), nullptr, 0, true, out, sizeof(*out));
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  g_device[*out] = {bytes, ThreadDevice(), pooled};
  return CUDA_SUCCESS;
}

bool ForgetDeviceAllocation(uintptr_t base, DeviceAllocation* out) {
  std::lock_guard lock(g_mu);
  auto it = g_device.find(base);
  if (it == g_device.end()) return false;
  if (out != nullptr) *out = it->second;
  g_device.erase(it);
  return true;
}

size_t LiveDeviceAllocations() {
  std::lock_guard lock(g_mu);
  return g_device.size();
}

void ForgetDeviceAllocations(int device) {
  std::lock_guard lock(g_mu);
  std::erase_if(g_device, [device](const auto& entry) {
    if (entry.second.device != device) return false;
    if (entry.second.pooled) PoolReleased(device, entry.second.bytes);
    return true;
  });
}

}  // namespace phos::frontend

namespace {

using phos::frontend::g_device;
using phos::frontend::g_host;
using phos::frontend::Holding;
using phos::frontend::g_mu;

}  // namespace

namespace phos::frontend {

// Host-to-device: chunks of at most a record's payload; with `sync`, the last waits.
CUresult CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream, bool sync) {
  if (CUresult r = AwaitHostFunctions(stream); r != CUDA_SUCCESS) return r;
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

CUresult FreeDevice(uintptr_t ptr) {
  if (ptr == 0) return CUDA_SUCCESS;
  ipc::PointerArgs a{ptr};
  CUresult r = Client::Get().Call(ipc::Op::kMemFree, &a, sizeof(a), nullptr, 0, true);
  DeviceAllocation freed;
  if (r == CUDA_SUCCESS && ForgetDeviceAllocation(a.ptr, &freed) && freed.pooled) PoolReleased(freed.device, freed.bytes);
  return r;
}

CUresult AllocateHost(size_t bytes, unsigned flags, void** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes == 0 ? 1 : bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(g_mu);
  g_host[reinterpret_cast<uintptr_t>(p)] = {bytes == 0 ? 1 : bytes, ThreadDevice(), false, flags};
  *out = p;
  return CUDA_SUCCESS;
}

CUresult FreeHost(void* ptr) {
  if (ptr == nullptr) return CUDA_SUCCESS;
  {
    std::lock_guard lock(g_mu);
    auto it = g_host.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_host.end() || it->second.registered) return CUDA_ERROR_INVALID_VALUE;
    g_host.erase(it);
  }
  std::free(ptr);
  return CUDA_SUCCESS;
}

bool FindHostRange(const void* ptr, HostRangeInfo* out) {
  std::lock_guard lock(g_mu);
  auto it = Holding(g_host, reinterpret_cast<uintptr_t>(ptr));
  if (it == g_host.end()) return false;
  *out = {it->first, it->second.bytes, it->second.device, it->second.registered, it->second.flags};
  return true;
}

}  // namespace phos::frontend

namespace {

using phos::frontend::CopyToDevice;
using phos::frontend::CopyToHost;

cudaError_t Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Return(cudaErrorInvalidValue);
  kind = phos::frontend::ResolveCopyKind(dst, src, kind);
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return Return(r);
  auto dst_u = reinterpret_cast<uintptr_t>(dst);
  auto src_u = reinterpret_cast<uintptr_t>(src);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return Return(CopyToDevice(dst_u, src, bytes, sid, !async));
    case cudaMemcpyDeviceToHost:
      // The bytes must be in host memory when the reply comes back, so even the async form
      // waits (CUDA's asynchronous copies to pageable memory do too).
      return Return(CopyToHost(dst, src_u, bytes, sid));
    case cudaMemcpyDeviceToDevice: {
      ipc::CopyArgs a{dst_u, src_u, bytes, sid};
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
  ipc::MemsetArgs a{reinterpret_cast<uintptr_t>(dst), bytes, 0, static_cast<uint32_t>(value & 0xff), 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kMemset, &a, sizeof(a), nullptr, 0, !async));
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (cudaError_t e = phos::frontend::CaptureProhibits("cudaMalloc"); e != cudaSuccess) return Return(e);
  if (size == 0) return cudaSuccess;
  uint64_t out = 0;
  CUresult r = phos::frontend::AllocateDevice(size, /*pooled=*/false, &out);
  if (r != CUDA_SUCCESS) return Return(r == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : static_cast<cudaError_t>(r));
  *ptr = reinterpret_cast<void*>(out);
  return cudaSuccess;
}

// Rows of `width` bytes at a pitch of the next multiple of 512 bytes: what NVIDIA's driver
// answers on compute capability 7.0 to 9.0 (cudaMallocPitch(1000 floats) gives a 4096-byte pitch).
cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  constexpr size_t kPitchAlignment = 512;
  if (ptr == nullptr || pitch == nullptr) return Return(cudaErrorInvalidValue);
  *ptr = nullptr;
  size_t aligned = 0, bytes = 0;
  if (__builtin_add_overflow(width, kPitchAlignment - 1, &aligned)) return Return(cudaErrorMemoryAllocation);
  aligned &= ~(kPitchAlignment - 1);
  if (__builtin_mul_overflow(aligned, height, &bytes)) return Return(cudaErrorMemoryAllocation);
  *pitch = aligned;
  return cudaMalloc(ptr, bytes);
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = phos::frontend::CaptureProhibits("cudaFree"); e != cudaSuccess) return Return(e);
  return Return(phos::frontend::FreeDevice(reinterpret_cast<uintptr_t>(ptr)));
}

// Pinned host memory is process-local memory here: copies to and from it go through the ring as
// pageable copies do (docs/remoting.md, "Departures").
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  if ((flags & cudaHostAllocMapped) != 0) {
    return phos::frontend::NotSupported("cudaHostAlloc", "mapped pinned memory (cudaHostAllocMapped) is not remoted");
  }
  return Return(phos::frontend::AllocateHost(size, flags, ptr));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) { return Return(phos::frontend::FreeHost(ptr)); }

// Registered ranges are recorded, not pinned: phosd cannot pin another process's pages, and every
// copy goes through the ring anyway. They answer as host memory to cudaPointerGetAttributes.
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  constexpr unsigned kKnown = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                              cudaHostRegisterReadOnly;
  if (ptr == nullptr || size == 0 || (flags & ~kKnown) != 0) return Return(cudaErrorInvalidValue);
  if ((flags & (cudaHostRegisterMapped | cudaHostRegisterIoMemory)) != 0) {
    return phos::frontend::NotSupported("cudaHostRegister", "mapped or I/O host memory is not remoted");
  }
  auto p = reinterpret_cast<uintptr_t>(ptr);
  if (size > UINTPTR_MAX - p) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  // Any overlap with a range already pinned, as the driver refuses it.
  auto next = g_host.lower_bound(p);
  if ((next != g_host.end() && next->first < p + size) || Holding(g_host, p) != g_host.end()) {
    return Return(cudaErrorHostMemoryAlreadyRegistered);
  }
  g_host[p] = {size, phos::frontend::ThreadDevice(), true, flags};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  auto it = g_host.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_host.end() || !it->second.registered) return Return(cudaErrorHostMemoryNotRegistered);
  g_host.erase(it);
  return cudaSuccess;
}

// No host memory is mapped into the device (cudaHostAllocMapped and cudaHostRegisterMapped are
// refused), so no host pointer has a device address.
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  if (device == nullptr || host == nullptr || flags != 0) return Return(cudaErrorInvalidValue);
  *device = nullptr;
  return phos::frontend::NotSupported("cudaHostGetDevicePointer", "no host memory is mapped into the device");
}

cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  if (flags == nullptr) return Return(cudaErrorInvalidValue);
  phos::frontend::HostRangeInfo range;
  // The flags of memory cudaHostAlloc made, asked by its base (cudaHostRegister ranges have none).
  if (!phos::frontend::FindHostRange(host, &range) || range.base != reinterpret_cast<uintptr_t>(host) ||
      range.registered) {
    return Return(cudaErrorInvalidValue);
  }
  *flags = range.flags;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return Return(cudaErrorInvalidValue);
  *attributes = {};
  phos::frontend::DeviceAllocation device;
  if (phos::frontend::FindDeviceAllocation(ptr, nullptr, &device)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = device.device;
    attributes->devicePointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  if (phos::frontend::HostRangeInfo range; phos::frontend::FindHostRange(ptr, &range)) {
    // Not mapped into the device: no device pointer.
    attributes->type = cudaMemoryTypeHost;
    attributes->device = range.device;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  // What NVIDIA's runtime answers for memory CUDA does not know.
  attributes->type = cudaMemoryTypeUnregistered;
  attributes->device = cudaInvalidDeviceId;
  attributes->hostPointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (cudaError_t e = phos::frontend::CaptureProhibits("cudaMemcpy"); e != cudaSuccess) return Return(e);
  return Copy(dst, src, count, kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy(dst, src, count, kind, stream, true);
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
  if (cudaError_t e = phos::frontend::CaptureProhibits("cudaMemset"); e != cudaSuccess) return Return(e);
  return Memset(dst, value, count, nullptr, false);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return Memset(dst, value, count, stream, true);
}

}  // extern "C"
