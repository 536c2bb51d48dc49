// Pitched (2D) copies and sets, and copies between the session's devices. A 2D copy with a host
// side travels packed: the frontend lays host rows out densely in ring records (host to device)
// or takes them densely from the reply area and spreads them at the caller's pitch (device to
// host), as many rows per record as fit; a row larger than a record goes as 1D copies.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cudart_internal.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace {

CUresult RowsToDevice(uintptr_t dst, size_t dpitch, const uint8_t* src, size_t spitch, size_t width, size_t height,
                      uint64_t stream, bool sync) {
  if (CUresult r = phos::frontend::AwaitHostFunctions(stream); r != CUDA_SUCCESS) return r;
  Client& c = Client::Get();
  size_t room = c.max_payload();
  if (room == 0) return CUDA_ERROR_NO_DEVICE;
  room -= sizeof(ipc::Copy2DArgs);
  const size_t per_record = room / width;
  if (per_record == 0) {
    for (size_t row = 0; row < height; ++row) {
      CUresult r = phos::frontend::CopyToDevice(dst + row * dpitch, src + row * spitch, width, stream,
                                                sync && row + 1 == height);
      if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  }
  std::vector<uint8_t> packed;
  for (size_t first = 0; first < height; first += per_record) {
    const size_t rows = std::min(per_record, height - first);
    packed.resize(rows * width);
    for (size_t row = 0; row < rows; ++row) std::memcpy(&packed[row * width], src + (first + row) * spitch, width);
    ipc::Copy2DArgs a{.dst = dst + first * dpitch, .dst_pitch = dpitch, .src = 0, .src_pitch = width, .width = width,
                      .height = rows, .stream = stream,
                      .kind = static_cast<uint32_t>(ipc::Copy2DKind::kHostToDevice), .pad = 0};
    CUresult r = c.Call(ipc::Op::kMemcpy2D, &a, sizeof(a), packed.data(), packed.size(), sync && first + rows == height);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult RowsToHost(uint8_t* dst, size_t dpitch, uintptr_t src, size_t spitch, size_t width, size_t height,
                    uint64_t stream) {
  Client& c = Client::Get();
  const size_t room = c.reply_capacity();
  if (room == 0) return CUDA_ERROR_NO_DEVICE;
  const size_t per_reply = room / width;
  if (per_reply == 0) {
    for (size_t row = 0; row < height; ++row) {
      CUresult r = phos::frontend::CopyToHost(dst + row * dpitch, src + row * spitch, width, stream);
      if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  }
  std::vector<uint8_t> packed;
  for (size_t first = 0; first < height; first += per_reply) {
    const size_t rows = std::min(per_reply, height - first);
    packed.resize(rows * width);
    ipc::Copy2DArgs a{.dst = 0, .dst_pitch = width, .src = src + first * spitch, .src_pitch = spitch, .width = width,
                      .height = rows, .stream = stream,
                      .kind = static_cast<uint32_t>(ipc::Copy2DKind::kDeviceToHost), .pad = 0};
    CUresult r = c.Call(ipc::Op::kMemcpy2D, &a, sizeof(a), nullptr, 0, true, packed.data(), packed.size());
    if (r != CUDA_SUCCESS) return r;
    for (size_t row = 0; row < rows; ++row) std::memcpy(dst + (first + row) * dpitch, &packed[row * width], width);
  }
  return CUDA_SUCCESS;
}

cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Return(cudaErrorInvalidValue);
  if (width > dpitch || width > spitch) return Return(cudaErrorInvalidPitchValue);
  // Every span must fit the address space before the frontend touches a host row.
  size_t span = 0;
  if (__builtin_mul_overflow(height - 1, std::max(dpitch, spitch), &span) || __builtin_add_overflow(span, width, &span)) {
    return Return(cudaErrorInvalidValue);
  }
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return Return(r);
  auto dst_u = reinterpret_cast<uintptr_t>(dst);
  auto src_u = reinterpret_cast<uintptr_t>(src);
  switch (phos::frontend::ResolveCopyKind(dst, src, kind)) {
    case cudaMemcpyHostToDevice:
      return Return(RowsToDevice(dst_u, dpitch, static_cast<const uint8_t*>(src), spitch, width, height, sid, !async));
    case cudaMemcpyDeviceToHost:
      // As for a 1D copy, the rows must be in host memory when the call returns, even async.
      return Return(RowsToHost(static_cast<uint8_t*>(dst), dpitch, src_u, spitch, width, height, sid));
    case cudaMemcpyDeviceToDevice: {
      ipc::Copy2DArgs a{.dst = dst_u, .dst_pitch = dpitch, .src = src_u, .src_pitch = spitch, .width = width,
                        .height = height, .stream = sid,
                        .kind = static_cast<uint32_t>(ipc::Copy2DKind::kDeviceToDevice), .pad = 0};
      return Return(Client::Get().Call(ipc::Op::kMemcpy2D, &a, sizeof(a), nullptr, 0, !async));
    }
    case cudaMemcpyHostToHost: {
      if (async) {
        ipc::HandleArgs a{sid};
        if (CUresult r = Client::Get().Call(ipc::Op::kStreamSynchronize, &a, sizeof(a), nullptr, 0, true);
            r != CUDA_SUCCESS) {
          return Return(r);
        }
      }
      for (size_t row = 0; row < height; ++row) {
        std::memmove(static_cast<uint8_t*>(dst) + row * dpitch, static_cast<const uint8_t*>(src) + row * spitch, width);
      }
      return cudaSuccess;
    }
    default:
      return Return(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t Memset2D(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream, bool async) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (dst == nullptr) return Return(cudaErrorInvalidValue);
  if (height > 1 && width > pitch) return Return(cudaErrorInvalidPitchValue);
  ipc::Memset2DArgs a{.dst = reinterpret_cast<uintptr_t>(dst), .pitch = pitch, .width = width, .height = height,
                      .stream = 0, .value = static_cast<uint32_t>(value & 0xff), .pad = 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kMemset2D, &a, sizeof(a), nullptr, 0, !async));
}

// cudaMemcpyPeer: both pointers must be device allocations of the devices named (phosd checks
// them again against the session's buffers); the copy itself is a device-to-device copy, which
// unified addressing lets the driver route between the session's devices.
cudaError_t CopyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                     bool async) {
  int devices = 0;
  if (CUresult r = phos::frontend::SessionDeviceCount(&devices); r != CUDA_SUCCESS) return Return(r);
  if (dst_device < 0 || dst_device >= devices || src_device < 0 || src_device >= devices) {
    return Return(cudaErrorInvalidDevice);
  }
  if (count == 0) return cudaSuccess;
  phos::frontend::DeviceAllocation to, from;
  if (!phos::frontend::FindDeviceAllocation(dst, nullptr, &to) || !phos::frontend::FindDeviceAllocation(src, nullptr, &from) ||
      to.device != dst_device || from.device != src_device) {
    return Return(cudaErrorInvalidValue);
  }
  ipc::CopyArgs a{reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), count, 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kMemcpyDtoD, &a, sizeof(a), nullptr, 0, !async));
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, true);
}

cudaError_t cudaMemset2D(void* dst, size_t pitch, int value, size_t width, size_t height) {
  return Memset2D(dst, pitch, value, width, height, nullptr, false);
}

cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) {
  return Memset2D(dst, pitch, value, width, height, stream, true);
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count) {
  return CopyPeer(dst, dst_device, src, src_device, count, nullptr, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  return CopyPeer(dst, dst_device, src, src_device, count, stream, true);
}

}  // extern "C"
