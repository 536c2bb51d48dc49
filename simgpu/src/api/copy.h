// Copies and memsets as stream operations: which engine runs them, at what modelled rate, and
// when the calling thread may return (CUDA's "API synchronization behavior").
#pragma once

#include <cstddef>
#include <memory>

#include <cuda.h>

#include "api/driver.h"

namespace phos::sim {

enum class CallKind {
  kSync,   // cuMemcpyHtoD & co: returns when the copy is complete
  kAsync,  // cuMemcpyHtoDAsync & co: returns at once, except for pageable host memory
};

// Which sides of a copy the entry point says are device memory: cuMemcpyHtoD names a device
// destination, cuMemcpyDtoH a device source, cuMemcpyDtoD both; cuMemcpy and cuMemcpyAsync take
// either, as unified addressing allows.
enum class CopySides { kUnified, kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

// A 2D copy: `height` rows of `width` bytes, each `dst_pitch` / `src_pitch` bytes after the last.
struct Rows {
  CUdeviceptr dst;
  size_t dst_pitch;
  CUdeviceptr src;
  size_t src_pitch;
  size_t width;
  size_t height;
};

// Copies `bytes` from `src` to `dst` on `stream`. A side the entry point names as device memory
// must be device memory (CUDA_ERROR_INVALID_VALUE otherwise, never a host copy through a bad
// pointer). Each side may be device memory (validated:
// the whole range must be allocated and accessible, else CUDA_ERROR_INVALID_VALUE) or host
// memory (pinned or pageable, which sets the modelled rate). Host-to-device and device-to-host
// copies run on their own copy engines; device-to-device copies on the compute engine.
CUresult EnqueueCopy(Driver& driver, Stream& stream, CUdeviceptr dst, CUdeviceptr src,
                     size_t bytes, CallKind kind, CopySides sides);

// phosSimMemcpyHtoDAsyncGuarded: an asynchronous host-to-device copy like cuMemcpyHtoDAsync's
// (engine, rate, stream order, pageable wait) whose device-side write goes through the backing's
// second mapping (DeviceMemory::WriteGuarded), so it neither faults on nor unguards a guarded
// destination. `dst` must lie in one linear allocation or one read-write VMM mapping and `src`
// must be host memory: CUDA_ERROR_INVALID_VALUE otherwise. Memory freed or unmapped before the
// copy runs fails it with CUDA_ERROR_ILLEGAL_ADDRESS (sticky), as a faulting copy would.
// EnqueueCopy over rows (cuMemcpy2D): each side's whole span, from its first row's start to its
// last row's end, is checked as one range; a pitch below the width (of more than one row) or a
// span that wraps is CUDA_ERROR_INVALID_VALUE. Paced as a copy of width * height bytes.
CUresult EnqueueCopy2D(Driver& driver, Stream& stream, const Rows& rows, CallKind kind, CopySides sides);

// A CUDA_MEMCPY2D (cuMemcpy2D, cuMemcpy2DAsync, a slice of a graph's memcpy node) as EnqueueCopy2D
// rows: host, device or unified sides, each row's start from its X and Y; an array side, a null
// side or an offset that wraps is CUDA_ERROR_INVALID_VALUE.
CUresult EnqueueMemcpy2D(Driver& driver, Stream& stream, const CUDA_MEMCPY2D& copy, CallKind kind);

CUresult EnqueueGuardedCopy(Driver& driver, Stream& stream, CUdeviceptr dst, const void* src, size_t bytes);

// Fills `count` elements of `element_size` (1, 2 or 4) bytes at `dst` with `value`, on `stream`.
// Asynchronous with respect to the host, as CUDA's memsets on device memory are.
CUresult EnqueueMemset(Driver& driver, Stream& stream, CUdeviceptr dst, uint32_t value,
                       size_t element_size, size_t count);

// cuMemsetD2D*: `height` rows of `width` elements, `pitch` bytes apart; the span from the first
// row to the end of the last must be device memory, as for a 2D copy.
CUresult EnqueueMemset2D(Driver& driver, Stream& stream, CUdeviceptr dst, size_t pitch, uint32_t value,
                         size_t element_size, size_t width, size_t height);

}  // namespace phos::sim
