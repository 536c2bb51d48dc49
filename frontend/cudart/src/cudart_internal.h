// Shared by the frontend CUDA runtime's translation units.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "client.h"

namespace phos::frontend {

// Records a failure as the thread's last error (cudaGetLastError) and returns it. CUresult and
// cudaError_t agree numerically on every error the server returns.
cudaError_t Return(CUresult result);
cudaError_t Return(cudaError_t error);
// Logs, once per call site, that an exported call cannot be served; returns cudaErrorNotSupported.
cudaError_t NotSupported(const char* call, const char* why);

inline uint64_t StreamId(cudaStream_t stream) { return reinterpret_cast<uintptr_t>(stream); }

// Whether [ptr, ptr + bytes) lies in a device allocation this process made (cudaMemcpyDefault).
bool IsDevicePointer(const void* ptr);
// The device allocations this process holds (cudart_memory.cc).
size_t LiveDeviceAllocations();
// Forgets the allocations made on session device `device`, which cudaDeviceReset freed.
void ForgetDeviceAllocations(int device);
// The session's device count, asked once (cudart_device.cc).
CUresult SessionDeviceCount(int* count);
// Forgets what the session told about its devices: a forked child's session may have others.
void ForgetSessionDevices();
// Forgets the server's kernel handles, which belong to the session that issued them (cudart_launch.cc).
void ForgetSessionKernels();

}  // namespace phos::frontend
