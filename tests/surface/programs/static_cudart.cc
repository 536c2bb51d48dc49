// A CUDA program with the CUDA runtime linked in statically (libcudart_static.a, nvcc's default):
// it defines cudaMalloc itself, so LD_LIBRARY_PATH cannot put phos's library in its place.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 1 << 20);
  std::printf("cudaMalloc: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
