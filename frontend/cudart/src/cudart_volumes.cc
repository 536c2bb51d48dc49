// Three-dimensional memory of linear allocations: cudaMalloc3D, cudaMemset3D and cudaMemcpy3D over
// pitched pointers (CUDA arrays are not served). A volume is `depth` slices of `height` rows, one
// slice every pitch * ysize bytes; each slice travels as a pitched 2D copy or set (cudart_pitched.cc),
// all of a set in one when its slices lie back to back.
#include "cudart_internal.h"

using phos::frontend::Return;

namespace {

// The byte at (x bytes, row y, slice z) of `p`; false when the offset does not fit.
bool At(const cudaPitchedPtr& p, size_t x, size_t y, size_t z, char** out) {
  size_t slice = 0, offset = 0;
  if (__builtin_mul_overflow(p.pitch, p.ysize, &slice) || __builtin_mul_overflow(z, slice, &offset) ||
      __builtin_add_overflow(offset, y * p.pitch, &offset) || __builtin_add_overflow(offset, x, &offset)) {
    return false;
  }
  *out = static_cast<char*>(p.ptr) + offset;
  return true;
}

cudaError_t Set3D(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream, bool async) {
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return cudaSuccess;
  if (extent.height > p.ysize && extent.depth > 1) return Return(cudaErrorInvalidValue);
  // Whole slices back to back are one pitched set of height * depth rows.
  if (extent.height == p.ysize || extent.depth == 1) {
    size_t rows = 0;
    if (__builtin_mul_overflow(extent.height, extent.depth, &rows)) return Return(cudaErrorInvalidValue);
    return async ? cudaMemset2DAsync(p.ptr, p.pitch, value, extent.width, rows, stream)
                 : cudaMemset2D(p.ptr, p.pitch, value, extent.width, rows);
  }
  for (size_t z = 0; z < extent.depth; ++z) {
    char* slice = nullptr;
    if (!At(p, 0, 0, z, &slice)) return Return(cudaErrorInvalidValue);
    cudaError_t e = async ? cudaMemset2DAsync(slice, p.pitch, value, extent.width, extent.height, stream)
                          : cudaMemset2D(slice, p.pitch, value, extent.width, extent.height);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t Copy3D(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async) {
  if (p == nullptr) return Return(cudaErrorInvalidValue);
  if (p->srcArray != nullptr || p->dstArray != nullptr) {
    return phos::frontend::NotSupported("cudaMemcpy3D", "CUDA arrays are not served");
  }
  const cudaExtent& e = p->extent;
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  for (size_t z = 0; z < e.depth; ++z) {
    char* src = nullptr;
    char* dst = nullptr;
    if (!At(p->srcPtr, p->srcPos.x, p->srcPos.y, p->srcPos.z + z, &src) ||
        !At(p->dstPtr, p->dstPos.x, p->dstPos.y, p->dstPos.z + z, &dst)) {
      return Return(cudaErrorInvalidValue);
    }
    cudaError_t r = async ? cudaMemcpy2DAsync(dst, p->dstPtr.pitch, src, p->srcPtr.pitch, e.width, e.height, p->kind, stream)
                          : cudaMemcpy2D(dst, p->dstPtr.pitch, src, p->srcPtr.pitch, e.width, e.height, p->kind);
    if (r != cudaSuccess) return r;
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

// Rows at cudaMallocPitch's pitch, height rows a slice, depth slices.
cudaError_t cudaMalloc3D(cudaPitchedPtr* pitched, cudaExtent extent) {
  if (pitched == nullptr) return Return(cudaErrorInvalidValue);
  size_t rows = 0;
  if (__builtin_mul_overflow(extent.height, extent.depth, &rows)) return Return(cudaErrorMemoryAllocation);
  size_t pitch = 0;
  void* ptr = nullptr;
  if (cudaError_t e = cudaMallocPitch(&ptr, &pitch, extent.width, rows); e != cudaSuccess) return e;
  *pitched = cudaPitchedPtr{ptr, pitch, extent.width, extent.height};
  return cudaSuccess;
}

cudaError_t cudaMemset3D(cudaPitchedPtr pitched, int value, cudaExtent extent) {
  return Set3D(pitched, value, extent, nullptr, false);
}

cudaError_t cudaMemset3DAsync(cudaPitchedPtr pitched, int value, cudaExtent extent, cudaStream_t stream) {
  return Set3D(pitched, value, extent, stream, true);
}

cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) { return Copy3D(p, nullptr, false); }

cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t stream) { return Copy3D(p, stream, true); }

}  // extern "C"
